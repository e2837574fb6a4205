// The list of built-in recipes.
#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/io/run_checkpoints.h"
#include "tune/recipes/recipe.h"
#include "tune/recipes/dpo/dpo_recipe.h"
#include "tune/recipes/latte/latte_recipe.h"
#include "tune/recipes/latte_t2v/t2v_recipe.h"
#include "tune/recipes/sana/sana_recipe.h"
#include "tune/recipes/sft/sft_recipe.h"

namespace tune::recipes {

std::optional<std::filesystem::path> inference_checkpoint(const InferRequest& request) {
  if (request.checkpoint) return request.checkpoint;
  if (request.run_dir) return io::newest_complete_checkpoint(*request.run_dir);
  return std::nullopt;
}

const std::vector<Recipe>& all_recipes() {
  static const std::vector<Recipe> recipes = {sft::make_recipe(), dpo::make_recipe(), latte::make_recipe(),
                                              latte_t2v::make_recipe(), sana::make_recipe()};
  return recipes;
}

namespace {

const Recipe* lookup(const std::string& name) {
  for (const auto& recipe : all_recipes()) {
    if (recipe.name == name) return &recipe;
  }
  return nullptr;
}

std::string known_names() {
  std::string known;
  for (const auto& recipe : all_recipes()) known += (known.empty() ? "" : ", ") + recipe.name;
  return known;
}

}  // namespace

const Recipe& find_recipe(const std::string& name) {
  if (const Recipe* recipe = lookup(name)) return *recipe;
  throw UsageError(fmt::format("unknown recipe '{}': known recipes are {}", name, known_names()));
}

const Recipe& find_recipe(const config::RecipeName& name) {
  if (const Recipe* recipe = lookup(name.name)) return *recipe;
  throw config::ConfigError({fmt::format("{}: recipe: unknown recipe '{}'; known recipes are {} (tune ls lists them)",
                                         name.location.to_string(), name.name, known_names())});
}

}  // namespace tune::recipes
