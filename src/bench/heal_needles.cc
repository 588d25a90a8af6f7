#include "molt/bench/heal_needles.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "molt/bench/answer.h"
#include "molt/common/error.h"
#include "molt/transfer/map_file.h"
#include "runtime/heal.h"

namespace molt {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// body ++ interlude ++ question: the prompt the receiver ends up having read.
std::vector<int32_t> joined(const HealNeedle& n, std::span<const int32_t> interlude) {
  std::vector<int32_t> p(n.body);
  p.insert(p.end(), interlude.begin(), interlude.end());
  p.insert(p.end(), n.question.begin(), n.question.end());
  return p;
}

// The receiver's cache carried from the sender's cache of the body.
// With `heal`, also the heal job that goes on from where the map's native layers left the cache.
KVCache carried(const CacheMap& map, const Model& sender, const KVCache& src, const Model& receiver,
                const HealNeedle& n, int64_t cap,
                std::unique_ptr<runtime::HealJob>* heal = nullptr) {
  KVCache dst = receiver.new_cache(cap);
  std::vector<float> hidden;
  map.apply(sender, src, receiver, n.body, TransferOptions{}, dst, &hidden);
  if (heal != nullptr) {
    *heal = std::make_unique<runtime::HealJob>(n.body, map.data().features.native_layers,
                                               std::move(hidden));
  }
  return dst;
}

struct Reading {
  double decode_ms = 0, heal_ms = 0;
  int64_t decode_steps = 0, heal_steps = 0;
  bool native = false;  // heal completed
};

// The receiver reads prompt[from, to) one decode step each; a heal chunk before each step.
Reading read_stepwise(const Model& m, KVCache& cache, std::span<const int32_t> prompt, int64_t from,
                      int64_t to, runtime::HealJob* heal, int64_t chunk) {
  Reading r;
  for (int64_t i = from; i < to; ++i) {
    if (heal != nullptr && !r.native) {
      const auto t0 = Clock::now();
      r.native = heal->step(m, cache, prompt.first(static_cast<size_t>(i)), chunk);
      r.heal_ms += ms_since(t0);
      ++r.heal_steps;
    }
    const auto t0 = Clock::now();
    m.forward(prompt.subspan(static_cast<size_t>(i), 1), cache, {});
    r.decode_ms += ms_since(t0);
    ++r.decode_steps;
  }
  return r;
}

nlohmann::json score(int64_t correct, int64_t n, int64_t same = -1) {
  nlohmann::json j = {{"correct", correct},
                      {"accuracy", n > 0 ? static_cast<double>(correct) / n : 0.0}};
  if (same >= 0) j["same_answer_as_native"] = same;
  return j;
}

}  // namespace

std::vector<HealNeedle> split_needles(const Tokenizer& tok, std::span<const NeedleItem> items) {
  std::vector<HealNeedle> out;
  for (size_t i = 0; i < items.size(); ++i) {
    const NeedleItem& item = items[i];
    const size_t cut = item.prompt.rfind("\n\n");
    if (cut == std::string::npos || cut == 0) {
      fail("needle {}: no blank line before its question to switch at", i);
    }
    HealNeedle n;
    n.body = tok.encode(item.prompt.substr(0, cut));
    n.question = tok.encode(item.prompt.substr(cut));
    n.answer = item.answer;
    n.answer_tokens = static_cast<int64_t>(tok.encode(item.answer).size());
    if (n.body.empty() || n.question.empty() || n.answer_tokens == 0) {
      fail("needle {}: empty body, question or answer", i);
    }
    out.push_back(std::move(n));
  }
  return out;
}

nlohmann::json measure_heal_needles(Ladder& sender_ladder, Ladder& receiver_ladder,
                                    const CacheMap& map, const Tokenizer& tok,
                                    std::span<const HealNeedle> needles,
                                    std::span<const int32_t> filler, const HealNeedleOptions& o,
                                    const std::function<void(int64_t, int64_t)>& progress) {
  if (o.after.empty()) fail("heal needles: no h (after) given");
  const int64_t h_max = *std::max_element(o.after.begin(), o.after.end());
  if (*std::min_element(o.after.begin(), o.after.end()) < 0) fail("heal needles: h < 0");
  if (o.chunk < 1) fail("heal needles: chunk {} < 1", o.chunk);
  for (int64_t c : o.cost_chunks)
    if (c < 1) fail("heal needles: cost chunk {} < 1", c);
  if (static_cast<int64_t>(filler.size()) <= h_max) {
    fail("heal needles: the filler has {} tokens, h up to {} needs more", filler.size(), h_max);
  }
  sender_ladder.rung(0).load();
  receiver_ladder.rung(0).load();
  const Model& sender = sender_ladder.rung(0).model();
  const Model& receiver = receiver_ladder.rung(0).model();
  const size_t H = o.after.size();
  // Per h: correct answers, and answers equal to the receiver's own (healed caches must agree).
  std::vector<int64_t> native(H), molt(H), heal(H), molt_same(H), heal_same(H), healed_first(H);
  std::vector<double> tokens(H);
  // The interlude of needle i starts at its own place in the filler.
  auto interlude = [&](size_t i, int64_t h) {
    const size_t span = filler.size() - static_cast<size_t>(h_max);
    return filler.subspan((i * 7919) % span, static_cast<size_t>(h));
  };
  auto answer = [&](KVCache cache, std::span<const int32_t> prompt, const HealNeedle& n) {
    return tok.decode(
        greedy_answer_from(receiver_ladder, 0, std::move(cache), prompt, n.answer_tokens));
  };

  struct Cost {
    double steps = 0, heal_ms = 0, decode_ms = 0, heal_steps = 0, decode_steps = 0, runs = 0;
  };
  std::vector<Cost> cost(o.cost_chunks.size());
  const int64_t n_total = static_cast<int64_t>(needles.size());
  for (size_t i = 0; i < needles.size(); ++i) {
    const HealNeedle& n = needles[i];
    const int64_t n0 = static_cast<int64_t>(n.body.size());
    KVCache src = sender.new_cache(n0);
    sender.forward(n.body, src, {});
    for (size_t k = 0; k < H; ++k) {
      const std::vector<int32_t> p = joined(n, interlude(i, o.after[k]));
      const int64_t len = static_cast<int64_t>(p.size());
      const int64_t cap = len + n.answer_tokens;
      tokens[k] += static_cast<double>(len) / static_cast<double>(needles.size());
      const std::string own = tok.decode(greedy_answer(receiver_ladder, 0, p, n.answer_tokens));
      native[k] += needle_answer_matches(own, n.answer);
      {
        KVCache c = carried(map, sender, src, receiver, n, cap);
        receiver.forward(std::span<const int32_t>(p).subspan(static_cast<size_t>(n0),
                                                             static_cast<size_t>(len - 1 - n0)),
                         c, {});
        const std::string got = answer(std::move(c), p, n);
        molt[k] += needle_answer_matches(got, n.answer);
        molt_same[k] += got == own;
      }
      std::unique_ptr<runtime::HealJob> job;
      KVCache c = carried(map, sender, src, receiver, n, cap, &job);
      const Reading r = read_stepwise(receiver, c, p, n0, len - 1, job.get(), o.chunk);
      healed_first[k] += r.native;
      const std::string got = answer(std::move(c), p, n);
      heal[k] += needle_answer_matches(got, n.answer);
      heal_same[k] += got == own;
    }
    // The schedules' costs: heal to the end while the receiver reads the filler after the body.
    if (static_cast<int64_t>(i) < o.cost_needles) {
      for (size_t j = 0; j < o.cost_chunks.size(); ++j) {
        const int64_t chunk = o.cost_chunks[j];
        const int64_t layers =
            receiver.config().num_hidden_layers - map.data().features.native_layers;
        const int64_t steps = layers * ((n0 + chunk - 1) / chunk);
        std::vector<int32_t> p(n.body);
        const auto more = filler.first(std::min<size_t>(filler.size(), static_cast<size_t>(steps)));
        p.insert(p.end(), more.begin(), more.end());
        std::unique_ptr<runtime::HealJob> job;
        KVCache c =
            carried(map, sender, src, receiver, n, static_cast<int64_t>(p.size()) + 1, &job);
        Reading r =
            read_stepwise(receiver, c, p, n0, static_cast<int64_t>(p.size()), job.get(), chunk);
        while (!r.native) {  // filler shorter than the schedule: finish without decoding
          const auto t0 = Clock::now();
          r.native = job->step(receiver, c, p, chunk);
          r.heal_ms += ms_since(t0);
          ++r.heal_steps;
        }
        Cost& t = cost[j];
        t.steps += static_cast<double>(r.heal_steps);
        t.heal_ms += r.heal_ms;
        t.heal_steps += static_cast<double>(r.heal_steps);
        t.decode_ms += r.decode_ms;
        t.decode_steps += static_cast<double>(r.decode_steps);
        t.runs += 1;
      }
    }
    if (progress) progress(static_cast<int64_t>(i) + 1, n_total);
  }

  nlohmann::json rows = nlohmann::json::array();
  for (size_t k = 0; k < H; ++k) {
    rows.push_back({{"h", o.after[k]},
                    {"mean_prompt_tokens", tokens[k]},
                    {"native", score(native[k], n_total)},
                    {"molt", score(molt[k], n_total, molt_same[k])},
                    {"heal", score(heal[k], n_total, heal_same[k])},
                    {"healed_before_answer", healed_first[k]}});
  }
  nlohmann::json costs = nlohmann::json::array();
  for (size_t j = 0; j < cost.size(); ++j) {
    const Cost& t = cost[j];
    if (t.runs == 0) continue;
    costs.push_back(
        {{"chunk", o.cost_chunks[j]},
         {"needles", t.runs},
         {"steps_to_native", t.steps / t.runs},
         {"heal_ms_per_step", t.heal_ms / t.heal_steps},
         {"decode_ms_per_step", t.decode_steps > 0 ? t.decode_ms / t.decode_steps : 0.0},
         {"heal_ms_total", t.heal_ms / t.runs}});
  }
  return {{"chunk", o.chunk}, {"after", o.after}, {"rows", rows}, {"cost", costs}};
}

}  // namespace molt
