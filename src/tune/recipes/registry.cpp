// The list of built-in recipes.
#include <fmt/format.h>

#include "tune/core/error.h"
#include "tune/recipes/recipe.h"
#include "tune/recipes/latte/latte_recipe.h"
#include "tune/recipes/sft/sft_recipe.h"

namespace tune::recipes {

const std::vector<Recipe>& all_recipes() {
  static const std::vector<Recipe> recipes = {sft::make_recipe(), latte::make_recipe()};
  return recipes;
}

const Recipe& find_recipe(const std::string& name) {
  std::string known;
  for (const auto& recipe : all_recipes()) {
    if (recipe.name == name) return recipe;
    known += (known.empty() ? "" : ", ") + recipe.name;
  }
  throw UsageError(fmt::format("unknown recipe '{}': known recipes are {}", name, known));
}

}  // namespace tune::recipes
