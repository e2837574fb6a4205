// Reading scheduler_config.json: which keys each class acts on, which it ignores as diffusers does, and which
// settings tune refuses (by file and key) because it does not implement them.
#include "tune/diffusion/scheduler_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "tune/core/error.h"
#include "tune/io/json_fields.h"
#include "tune/io/python_json.h"

namespace tune::diffusion {
namespace {

using io::JsonFields;

// Keys both classes act on.
const std::set<std::string> kCommonKeys = {
    "num_train_timesteps", "beta_start",     "beta_end",        "beta_schedule",         "trained_betas",
    "prediction_type",     "thresholding",   "dynamic_thresholding_ratio", "sample_max_value",
    "timestep_spacing",    "steps_offset",   "rescale_betas_zero_snr",     "variance_type"};
const std::set<std::string> kDdimKeys = {"clip_sample", "clip_sample_range", "set_alpha_to_one"};
const std::set<std::string> kDpmKeys = {
    "solver_order",     "algorithm_type",        "solver_type",       "lower_order_final", "euler_at_final",
    "use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "use_lu_lambdas",    "use_flow_sigmas",
    "flow_shift",       "final_sigmas_type",     "lambda_min_clipped", "use_dynamic_shifting", "time_shift_type"};
// The __init__ arguments of diffusers 0.42's other schedulers (KarrasDiffusionSchedulers, DDIM's compatibles).
// diffusers keeps such keys as hidden config entries without effect on this class; so does tune.
const std::set<std::string> kOtherSchedulerKeys = {
    "algorithm_type", "clip_sample", "clip_sample_range", "disable_corrector", "dynamic_thresholding_ratio",
    "euler_at_final", "final_sigmas_type", "flow_shift", "interpolation_type", "lambda_min_clipped",
    "lower_order_final", "predict_x0", "rho", "set_alpha_to_one", "shift_terminal", "sigma_data", "sigma_max",
    "sigma_min", "sigma_schedule", "skip_prk_steps", "solver_order", "solver_p", "solver_type", "thresholding",
    "time_shift_type", "timestep_type", "use_beta_sigmas", "use_dynamic_shifting", "use_exponential_sigmas",
    "use_flow_sigmas", "use_karras_sigmas", "use_lu_lambdas", "variance_type", "shift", "base_shift", "max_shift",
    "base_image_seq_len", "max_image_seq_len", "invert_sigmas", "stochastic_sampling"};
// FlowMatchEulerDiscreteScheduler's own keys; it has no DDPM process, so the common keys above are other
// schedulers' keys to it.
const std::set<std::string> kFlowMatchEulerKeys = {
    "num_train_timesteps", "shift", "use_dynamic_shifting", "base_shift", "max_shift", "base_image_seq_len",
    "max_image_seq_len", "invert_sigmas", "shift_terminal", "use_karras_sigmas", "use_exponential_sigmas",
    "use_beta_sigmas", "time_shift_type", "stochastic_sampling"};
// DDPMScheduler's variance types, the values a hidden variance_type can hold.
const std::vector<std::string> kVarianceTypes = {"fixed_small", "fixed_small_log", "fixed_large", "fixed_large_log",
                                                 "learned",     "learned_range"};

std::string quoted_list(const std::vector<std::string>& values) {
  std::vector<std::string> quoted;
  for (const auto& value : values) quoted.push_back(fmt::format("\"{}\"", value));
  return fmt::format("{}", fmt::join(quoted, ", "));
}

// A string key that must hold one of `allowed`: the values tune implements, which may be fewer than diffusers'.
std::string one_of(const JsonFields& fields, const std::string& key, const std::string& fallback,
                   const std::vector<std::string>& allowed, const std::string& class_name) {
  const auto value = fields.string(key, fallback);
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
    fields.fail(key, fmt::format("is \"{}\", which tune's {} does not implement (it takes {})", value, class_name,
                                 quoted_list(allowed)));
  }
  return value;
}

// A boolean setting tune implements only in one state; diffusers' default applies when the key is absent.
void require_flag(const JsonFields& fields, const std::string& key, bool diffusers_default, bool implemented,
                  const std::string& class_name) {
  const bool value = fields.boolean(key, diffusers_default);
  if (value != implemented) {
    fields.fail(key, fmt::format("is {}{}, which tune's {} does not implement yet (it needs {})", value,
                                 fields.has(key) ? "" : " (diffusers' default: the key is absent)", class_name,
                                 implemented));
  }
}

// Keys tune acts on for this class, or ignores as diffusers does; anything else is unknown to every diffusers
// scheduler, so likely a typo or a newer diffusers feature.
void check_keys(const nlohmann::json& json, const JsonFields& fields, SchedulerKind kind,
                const std::string& class_name) {
  const auto& own = kind == SchedulerKind::ddim                   ? kDdimKeys
                    : kind == SchedulerKind::dpm_solver_multistep ? kDpmKeys
                                                                  : kFlowMatchEulerKeys;
  for (const auto& [key, value] : json.items()) {
    if (!key.empty() && key[0] == '_') continue;  // _class_name, _diffusers_version, _name_or_path
    if (kCommonKeys.count(key) || own.count(key) || kOtherSchedulerKeys.count(key)) continue;
    fields.fail(key, fmt::format("is not a setting of {} or of any other diffusers 0.42 scheduler tune knows; "
                                 "remove it or check its spelling",
                                 class_name));
  }
}

// A flow shift: positive, or sigma' = s sigma / (1 + (s - 1) sigma) leaves (0, 1].
double read_shift(const JsonFields& fields, const std::string& key) {
  const double shift = fields.real(key, 1.0);
  if (!(shift > 0.0) || !std::isfinite(shift)) fields.fail(key, fmt::format("must be a number > 0, got {}", shift));
  return shift;
}

void read_common(const JsonFields& fields, SchedulerConfig& config) {
  const auto& name = config.class_name;
  config.num_train_timesteps = fields.positive("num_train_timesteps", config.num_train_timesteps);
  config.beta_start = fields.real("beta_start", config.beta_start);
  config.beta_end = fields.real("beta_end", config.beta_end);
  config.beta_schedule =
      one_of(fields, "beta_schedule", config.beta_schedule, {"linear", "scaled_linear", "squaredcos_cap_v2"}, name);
  // flow_prediction only means something on flow sigmas; read_dpm checks the pair
  std::vector<std::string> predictions = {"epsilon", "v_prediction", "sample"};
  if (config.kind == SchedulerKind::dpm_solver_multistep) predictions.push_back("flow_prediction");
  config.prediction_type = one_of(fields, "prediction_type", config.prediction_type, predictions, name);
  config.timestep_spacing =
      one_of(fields, "timestep_spacing", config.timestep_spacing, {"leading", "trailing", "linspace"}, name);
  config.steps_offset = fields.integer("steps_offset", config.steps_offset);
  if (config.steps_offset < 0) fields.fail("steps_offset", fmt::format("must be >= 0, got {}", config.steps_offset));
  require_flag(fields, "thresholding", false, false, name);
  require_flag(fields, "rescale_betas_zero_snr", false, false, name);
  fields.real("dynamic_thresholding_ratio", 0.995);  // used by thresholding only; type-checked
  fields.real("sample_max_value", 1.0);
  if (fields.has("variance_type")) {
    config.variance_type = fields.string("variance_type", "");
    if (std::find(kVarianceTypes.begin(), kVarianceTypes.end(), config.variance_type) == kVarianceTypes.end()) {
      fields.fail("variance_type", fmt::format("is \"{}\"; diffusers' variance types are {}", config.variance_type,
                                               quoted_list(kVarianceTypes)));
    }
  }
}

void read_trained_betas(const nlohmann::json& json, const JsonFields& fields, SchedulerConfig& config) {
  if (!fields.has("trained_betas")) return;
  const auto& list = json.at("trained_betas");
  if (!list.is_array() || !std::all_of(list.begin(), list.end(), [](const auto& v) { return v.is_number(); })) {
    fields.fail("trained_betas", "must be null or a list of numbers");
  }
  for (const auto& value : list) config.trained_betas.push_back(value.get<double>());
  if (static_cast<int64_t>(config.trained_betas.size()) != config.num_train_timesteps) {
    fields.fail("trained_betas", fmt::format("holds {} betas for num_train_timesteps {}",
                                             config.trained_betas.size(), config.num_train_timesteps));
  }
}

void read_ddim(const JsonFields& fields, SchedulerConfig& config) {
  // diffusers' DDIM clips x_0 but keeps the unclipped eps; improved-diffusion's clip_denoised re-derives eps.
  require_flag(fields, "clip_sample", true, false, config.class_name);
  fields.real("clip_sample_range", 1.0);
  config.set_alpha_to_one = fields.boolean("set_alpha_to_one", config.set_alpha_to_one);
}

void read_dpm(const JsonFields& fields, SchedulerConfig& config) {
  const auto& name = config.class_name;
  config.solver_order = fields.integer("solver_order", config.solver_order);
  if (config.solver_order != 1 && config.solver_order != 2) {
    fields.fail("solver_order", fmt::format("is {}, which tune's {} does not implement (it takes 1 or 2)",
                                            config.solver_order, name));
  }
  config.algorithm_type = one_of(fields, "algorithm_type", config.algorithm_type, {"dpmsolver++"}, name);
  config.solver_type = one_of(fields, "solver_type", config.solver_type, {"midpoint", "heun"}, name);
  config.lower_order_final = fields.boolean("lower_order_final", config.lower_order_final);
  config.euler_at_final = fields.boolean("euler_at_final", config.euler_at_final);
  config.final_sigmas_type = one_of(fields, "final_sigmas_type", config.final_sigmas_type, {"zero", "sigma_min"}, name);
  config.lambda_min_clipped = fields.real("lambda_min_clipped", config.lambda_min_clipped);
  if (std::isnan(config.lambda_min_clipped)) fields.fail("lambda_min_clipped", "is NaN");
  for (const char* key : {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas", "use_lu_lambdas",
                          "use_dynamic_shifting"}) {
    require_flag(fields, key, false, false, name);
  }
  config.use_flow_sigmas = fields.boolean("use_flow_sigmas", config.use_flow_sigmas);
  config.flow_shift = read_shift(fields, "flow_shift");  // used with flow sigmas only, as in diffusers
  // time_shift_type only acts with use_dynamic_shifting (refused above); "exponential" is DPM-Solver's only value
  one_of(fields, "time_shift_type", "exponential", {"exponential"}, name);
  // diffusers converts a flow prediction with the flow sigma (x_0 = x - sigma v) and any other with alpha_t and
  // sigma_t of whichever sigmas it has; tune implements the two pairings a model is trained for.
  const bool flow_prediction = config.prediction_type == "flow_prediction";
  if (config.use_flow_sigmas && !flow_prediction) {
    fields.fail("prediction_type", fmt::format("is \"{}\" with use_flow_sigmas true, which tune's {} does not "
                                               "implement (flow sigmas take \"flow_prediction\")",
                                               config.prediction_type, name));
  }
  if (flow_prediction && !config.use_flow_sigmas) {
    fields.fail("use_flow_sigmas", fmt::format("is false with prediction_type \"flow_prediction\", which tune's {} "
                                               "does not implement (a flow model samples on flow sigmas: set "
                                               "\"use_flow_sigmas\": true)",
                                               name));
  }
}

void read_flow_match_euler(const JsonFields& fields, SchedulerConfig& config) {
  const auto& name = config.class_name;
  config.num_train_timesteps = fields.positive("num_train_timesteps", config.num_train_timesteps);
  config.prediction_type = "flow_prediction";  // the class has no such key: its step is x + (sigma' - sigma) v
  config.flow_shift = read_shift(fields, "shift");
  // diffusers' FlowMatchEuler keeps a DPM-Solver flow_shift as a hidden key and samples unshifted (shift 1): the
  // silent mistake of loading it from Sana's DPM-Solver config; tune names it instead.
  if (fields.has("flow_shift") && fields.real("flow_shift", 1.0) != config.flow_shift) {
    fields.fail("flow_shift", fmt::format("is {}, but {} reads its shift from 'shift' ({}) and ignores flow_shift "
                                          "(DPMSolverMultistepScheduler's key): set \"shift\" or remove flow_shift",
                                          fields.real("flow_shift", 1.0), name, config.flow_shift));
  }
  for (const char* key : {"use_dynamic_shifting", "invert_sigmas", "use_karras_sigmas", "use_exponential_sigmas",
                          "use_beta_sigmas", "stochastic_sampling"}) {
    require_flag(fields, key, false, false, name);
  }
  // diffusers stretches the schedule only for a shift_terminal that is truthy: null and 0 leave it as it is
  if (fields.real("shift_terminal", 0.0) != 0.0) {
    fields.fail("shift_terminal", fmt::format("is {}, which tune's {} does not implement yet (it needs null)",
                                              fields.real("shift_terminal", 0.0), name));
  }
  // used with use_dynamic_shifting only (refused above); type-checked
  fields.real("base_shift", 0.5);
  fields.real("max_shift", 1.15);
  fields.integer("base_image_seq_len", 256);
  fields.integer("max_image_seq_len", 4096);
  one_of(fields, "time_shift_type", "exponential", {"exponential", "linear"}, name);
}

}  // namespace

SchedulerConfig parse_scheduler_config(const nlohmann::json& json, const std::filesystem::path& source) {
  if (!json.is_object()) {
    throw InputError(fmt::format("{}: expected a JSON object (a diffusers scheduler config), got {}", source.string(),
                                 json.type_name()));
  }
  const JsonFields fields(json, source.string());
  SchedulerConfig config;
  config.source = source;
  if (!fields.has("_class_name")) fields.fail("_class_name", "is missing: which diffusers scheduler is this?");
  config.class_name = fields.string("_class_name", "");
  if (config.class_name == "DDIMScheduler") {
    config.kind = SchedulerKind::ddim;
  } else if (config.class_name == "DPMSolverMultistepScheduler") {
    config.kind = SchedulerKind::dpm_solver_multistep;
    config.timestep_spacing = "linspace";  // the class's default
  } else if (config.class_name == "FlowMatchEulerDiscreteScheduler") {
    config.kind = SchedulerKind::flow_match_euler;
  } else {
    fields.fail("_class_name", fmt::format("is \"{}\": not implemented yet; tune samples with DDIMScheduler, "
                                           "DPMSolverMultistepScheduler and FlowMatchEulerDiscreteScheduler",
                                           config.class_name));
  }
  check_keys(json, fields, config.kind, config.class_name);
  if (config.kind == SchedulerKind::flow_match_euler) {
    // no DDPM process: the betas, spacing and prediction keys are other schedulers' (hidden, without effect)
    read_flow_match_euler(fields, config);
    return config;
  }
  read_common(fields, config);
  read_trained_betas(json, fields, config);
  if (config.kind == SchedulerKind::ddim) {
    read_ddim(fields, config);
  } else {
    read_dpm(fields, config);
  }
  return config;
}

SchedulerConfig read_scheduler_config(const std::filesystem::path& json) {
  return parse_scheduler_config(io::read_python_json_file(json, "the scheduler config"), json);
}

}  // namespace tune::diffusion
