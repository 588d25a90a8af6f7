// SessionOptions: range checks and the JSON form every front end reads (CLI flags, server
// requests, the C API's options string). One table of fields keeps to_json, from_json and the
// unknown-key message in step.
#include "molt/runtime/options.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "molt/common/error.h"

namespace molt {
namespace {

using json = nlohmann::json;

// One JSON key bound to one field: how to write it and how to read it back.
struct Field {
  const char* key;
  std::function<json(const SessionOptions&)> get;
  std::function<void(SessionOptions&, const json&, const std::string& where)> set;
};

template <typename T>
T read(const json& v, const std::string& where) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) fail("{}: expected true or false, got {}", where, v.dump());
    return v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    const bool fits =
        std::is_unsigned_v<T>
            ? v.is_number_unsigned() && v.get<uint64_t>() <= std::numeric_limits<T>::max()
            // An unsigned value past INT64_MAX would wrap to a negative int64.
            : v.is_number_integer() &&
                  !(v.is_number_unsigned() &&
                    v.get<uint64_t>() >
                        static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) &&
                  v.get<int64_t>() >= std::numeric_limits<T>::min() &&
                  v.get<int64_t>() <= std::numeric_limits<T>::max();
    if (!fits) fail("{}: expected an integer in range, got {}", where, v.dump());
    return v.get<T>();
  } else {
    if (!v.is_number()) fail("{}: expected a number, got {}", where, v.dump());
    return v.get<T>();
  }
}

template <typename T>
Field field(const char* key, T SessionOptions::*m) {
  return {key, [m](const SessionOptions& o) { return json(o.*m); },
          [m](SessionOptions& o, const json& v, const std::string& w) { o.*m = read<T>(v, w); }};
}

// A field of a nested struct (sampling, transfer).
template <typename S, typename T>
Field field(const char* key, S SessionOptions::*part, T S::*m) {
  return {key, [part, m](const SessionOptions& o) { return json((o.*part).*m); },
          [part, m](SessionOptions& o, const json& v, const std::string& w) {
            (o.*part).*m = read<T>(v, w);
          }};
}

const std::vector<Field>& sampling_fields() {
  static const std::vector<Field> f = {
      field("temperature", &SessionOptions::sampling, &SamplingParams::temperature),
      field("top_k", &SessionOptions::sampling, &SamplingParams::top_k),
      field("top_p", &SessionOptions::sampling, &SamplingParams::top_p),
      field("repetition_penalty", &SessionOptions::sampling, &SamplingParams::repetition_penalty),
      field("seed", &SessionOptions::sampling, &SamplingParams::seed),
  };
  return f;
}

const std::vector<Field>& transfer_fields() {
  static const std::vector<Field> f = {
      field("recompute_layers", &SessionOptions::transfer, &TransferOptions::recompute_layers),
      field("anchors", &SessionOptions::transfer, &TransferOptions::anchors),
  };
  return f;
}

const std::vector<Field>& top_fields() {
  static const std::vector<Field> f = {
      {"policy", [](const SessionOptions& o) { return json(policy_name(o.policy)); },
       [](SessionOptions& o, const json& v, const std::string& w) {
         if (!v.is_string()) fail("{}: expected a policy name, got {}", w, v.dump());
         try {
           o.policy = parse_policy(v.get<std::string>());
         } catch (const Error& e) {
           fail("{}: {}", w, e.what());
         }
       }},
      field("max_tokens", &SessionOptions::max_tokens),
      field("stop_at_eos", &SessionOptions::stop_at_eos),
      {"stop_ids", [](const SessionOptions& o) { return json(o.stop_ids); },
       [](SessionOptions& o, const json& v, const std::string& w) {
         if (!v.is_array()) fail("{}: expected a list of token ids, got {}", w, v.dump());
         std::vector<int32_t> ids;
         for (size_t i = 0; i < v.size(); ++i) {
           ids.push_back(read<int32_t>(v[i], fmt::format("{}[{}]", w, i)));
         }
         o.stop_ids = std::move(ids);
       }},
      field("grace_steps", &SessionOptions::grace_steps),
      field("up_margin", &SessionOptions::up_margin),
      field("up_after", &SessionOptions::up_after),
      field("prefill_chunk", &SessionOptions::prefill_chunk),
      field("heal_chunk", &SessionOptions::heal_chunk),
      field("poll_ms", &SessionOptions::poll_ms),
      field("max_parked_steps", &SessionOptions::max_parked_steps),
      field("capacity", &SessionOptions::capacity),
      {"kv_dtype",
       [](const SessionOptions& o) { return json(std::string(kv_dtype_name(o.kv_dtype))); },
       [](SessionOptions& o, const json& v, const std::string& w) {
         if (!v.is_string()) fail("{}: expected f32, f16 or int8, got {}", w, v.dump());
         o.kv_dtype = parse_kv_dtype(v.get<std::string>(), w);
       }},
      field("shed_sink", &SessionOptions::shed_sink),
      field("shed_drop", &SessionOptions::shed_drop),
      field("auto_max_stall_ms", &SessionOptions::auto_max_stall_ms),
      field("auto_min_retention", &SessionOptions::auto_min_retention),
      field("auto_reprefill_below", &SessionOptions::auto_reprefill_below),
      field("measure_seams", &SessionOptions::measure_seams),
      field("measure_rss", &SessionOptions::measure_rss),
  };
  return f;
}

json write(const SessionOptions& o, const std::vector<Field>& fields) {
  json j = json::object();
  for (const Field& f : fields) j[f.key] = f.get(o);
  return j;
}

std::string known_keys(const std::vector<Field>& fields, bool nested) {
  std::vector<std::string> keys;
  keys.reserve(fields.size() + 2);
  for (const Field& f : fields) keys.emplace_back(f.key);
  if (nested) keys.insert(keys.end(), {"sampling", "transfer"});
  return fmt::format("{}", fmt::join(keys, ", "));
}

void read_object(SessionOptions& o, const json& j, const std::vector<Field>& fields,
                 const std::string& where, bool top) {
  if (!j.is_object()) fail("{}: expected a JSON object, got {}", where, j.dump());
  for (const auto& [key, value] : j.items()) {
    const std::string w = fmt::format("{}.{}", where, key);
    if (top && key == "sampling") {
      read_object(o, value, sampling_fields(), w, false);
      continue;
    }
    if (top && key == "transfer") {
      read_object(o, value, transfer_fields(), w, false);
      continue;
    }
    const Field* f = nullptr;
    for (const Field& c : fields) {
      if (key == c.key) f = &c;
    }
    if (f == nullptr) {
      fail("{}: unknown key '{}' (known: {})", where, key, known_keys(fields, top));
    }
    f->set(o, value, w);
  }
}

// Each check states what must hold, so a NaN (which fails every comparison) is refused too.
void need(bool ok, const char* field, const char* rule, double got) {
  if (!ok) fail("{}: must be {} (got {})", field, rule, got);
}

}  // namespace

void SessionOptions::validate() const {
  auto d = [](auto x) { return static_cast<double>(x); };
  need(max_tokens > 0, "max_tokens", "> 0", d(max_tokens));
  need(grace_steps >= 0, "grace_steps", ">= 0", d(grace_steps));
  need(up_margin >= 0 && std::isfinite(up_margin), "up_margin", ">= 0", up_margin);
  need(up_after >= 0, "up_after", ">= 0", d(up_after));
  need(prefill_chunk > 0, "prefill_chunk", "> 0", d(prefill_chunk));
  need(heal_chunk > 0, "heal_chunk", "> 0", d(heal_chunk));
  need(poll_ms >= 0 && std::isfinite(poll_ms), "poll_ms", ">= 0", poll_ms);
  need(max_parked_steps > 0, "max_parked_steps", "> 0", d(max_parked_steps));
  need(capacity >= 0, "capacity", ">= 0 (0: prompt + max_tokens)", d(capacity));
  need(shed_sink >= -1, "shed_sink", ">= -1 (-1: never shed)", d(shed_sink));
  need(shed_drop >= 0, "shed_drop", ">= 0 (0: a quarter of the capacity)", d(shed_drop));
  need(auto_reprefill_below >= 0, "auto_reprefill_below", ">= 0", d(auto_reprefill_below));
  need(auto_max_stall_ms >= 0, "auto_max_stall_ms", ">= 0", auto_max_stall_ms);
  need(auto_min_retention >= 0, "auto_min_retention", ">= 0", auto_min_retention);
  need(sampling.temperature >= 0 && std::isfinite(sampling.temperature), "sampling.temperature",
       ">= 0 (0: greedy)", sampling.temperature);
  need(sampling.top_k >= 0, "sampling.top_k", ">= 0 (0: off)", sampling.top_k);
  need(sampling.top_p > 0 && sampling.top_p <= 1, "sampling.top_p", "in (0, 1] (1: off)",
       sampling.top_p);
  need(sampling.repetition_penalty > 0 && std::isfinite(sampling.repetition_penalty),
       "sampling.repetition_penalty", "> 0 (1: off)", sampling.repetition_penalty);
  need(transfer.recompute_layers >= 0, "transfer.recompute_layers", ">= 0",
       transfer.recompute_layers);
  need(transfer.anchors >= 0, "transfer.anchors", ">= 0", transfer.anchors);
  for (int32_t id : stop_ids) need(id >= 0, "stop_ids", "token ids >= 0", id);
}

nlohmann::json to_json(const SessionOptions& o) {
  json j = write(o, top_fields());
  j["sampling"] = write(o, sampling_fields());
  j["transfer"] = write(o, transfer_fields());
  return j;
}

SessionOptions options_from_json(const nlohmann::json& j, const SessionOptions& base,
                                 const char* what) {
  SessionOptions o = base;
  read_object(o, j, top_fields(), what, true);
  try {
    o.validate();
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
  return o;
}

}  // namespace molt
