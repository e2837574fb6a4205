// The run tests use the shared scratch-directory helpers under the tune::test names they were written with.
#pragma once

#include "common/scratch_dir.h"

namespace tune::test {
using tune::testing::read_text;
using tune::testing::ScratchDir;
using tune::testing::write_text;
}  // namespace tune::test
