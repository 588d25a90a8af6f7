// The rows8 copy of an MLX checkpoint that molt keeps beside it, so that a checkpoint as
// published decodes with this CPU's fastest kernel and its weights still live in file pages
// (mapped, so a parked rung gives them back) — without the user re-laying it out by hand.
//
// The copy is `molt quantize --interleave` of the checkpoint (the same words, scales and
// biases, moved; nothing requantised), written once into <checkpoint>/.molt-cache/rows8, or,
// where the checkpoint's folder cannot be written, into the user's cache folder
// ($MOLT_CACHE_DIR, else $XDG_CACHE_HOME/molt, else ~/.cache/molt) under rows8/<hash of the
// checkpoint's path>. A stamp (molt-source.json) records each source file's size, mtime, ctime
// and inode: a checkpoint changed in place gets a new copy on its next load.
#pragma once

#include <filesystem>
#include <string>

namespace molt {

struct LayoutCacheResult {
  std::filesystem::path dir;  // the checkpoint to open: the rows8 copy, or the source itself
  bool rows8 = false;         // dir is the rows8 copy
  std::string note;           // what happened and why, one line (empty: nothing to say)
};

// The rows8 copy of the MLX-quantised checkpoint `checkpoint` (config layout "rows"), made if
// it is missing or stale. Never throws for a cache it cannot write or read: it returns the
// source itself with the reason in `note` (a folder it may not write, a full disk, a tensor
// whose rows do not tile by 8).
LayoutCacheResult rows8_layout_cache(const std::filesystem::path& checkpoint);

// The folder rows8_layout_cache uses for `checkpoint` when it cannot write beside it.
std::filesystem::path user_layout_cache_dir(const std::filesystem::path& checkpoint);

}  // namespace molt
