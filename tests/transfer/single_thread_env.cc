// The transfer tests use tiny models: one thread is fastest, and on a loaded machine OpenMP
// threads waiting for each other would cost more than the work.
#include <gtest/gtest.h>

#include "molt/kernels/threads.h"

namespace {

class SingleThread : public ::testing::Environment {
 public:
  void SetUp() override { molt::set_num_threads(1); }
};

const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new SingleThread);

}  // namespace
