// The standard transfer conditions and floors.
#include "molt/transfer/conditions.h"

#include <fmt/format.h>

namespace molt {

void add_floors(ConditionSet& set, const Model& receiver, const TokenFloor& floor) {
  set.conditions.push_back({"zero cache", [](const KVCache& src, std::span<const int32_t>,
                                             KVCache& d) { fill_zero_cache(src.size(), d); }});
  set.token_identity = std::make_unique<TokenIdentityCache>(receiver, floor);
  const TokenIdentityCache* t = set.token_identity.get();
  set.conditions.push_back(
      {"token-identity cache",
       [t](const KVCache&, std::span<const int32_t> ids, KVCache& d) { t->fill(ids, d); }});
}

ConditionSet transfer_conditions(const CacheMap& map, const Model& sender, const Model& receiver,
                                 const std::vector<int>& recompute,
                                 const std::vector<int>& anchors) {
  ConditionSet set;
  auto with = [&](std::string name, TransferOptions o) {
    const CacheMap* m = &map;
    const Model *s = &sender, *r = &receiver;
    set.conditions.push_back(
        {std::move(name), [m, s, r, o](const KVCache& src, std::span<const int32_t> t, KVCache& d) {
           m->apply(*s, src, *r, t, o, d);
         }});
  };
  with(fmt::format("map ({})", map.method()), {});
  for (int r : recompute) {
    TransferOptions o;
    o.recompute_layers = r;
    with(fmt::format("map + recompute r={}", r), o);
  }
  for (int a : anchors) {
    TransferOptions o;
    o.anchors = a;
    with(fmt::format("map + anchors a={}", a), o);
  }
  return set;
}

}  // namespace molt
