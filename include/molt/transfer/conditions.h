// The conditions every transfer figure is shown with (DESIGN.md §6): the map alone, with
// recompute r, with anchors a, and the floors a map must beat — a zero cache and a
// token-identity cache whose per-token means come from calibration text (token_floor.h), never
// from the evaluation windows. Used by `molt transfer eval|needle` and `molt eval nll`.
#pragma once

#include <memory>
#include <vector>

#include "molt/transfer/eval.h"
#include "molt/transfer/token_floor.h"
#include "molt/transfer/transfer.h"

namespace molt {

struct ConditionSet {
  std::vector<Condition> conditions;
  std::unique_ptr<TokenIdentityCache> token_identity;  // what the floor's filler points at
};

// Appends "zero cache" and "token-identity cache" (in that order), the latter filled from
// `floor`. The filler keeps pointers into `set`, so move the set, never copy its conditions out
// alone.
void add_floors(ConditionSet& set, const Model& receiver, const TokenFloor& floor);

// "map (METHOD)", "map + recompute r=R" for each R, "map + anchors a=A" for each A (add the
// floors with add_floors). The fillers refer to `map`, `sender` and `receiver`, which must
// outlive the set.
ConditionSet transfer_conditions(const CacheMap& map, const Model& sender, const Model& receiver,
                                 const std::vector<int>& recompute,
                                 const std::vector<int>& anchors);

}  // namespace molt
