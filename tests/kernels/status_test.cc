// Status / StatusOr invariants and the checks that stay in release builds (kernels/core).
#include "kernels/core/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kernels/core/check.h"
#include "kernels/formats/convert.h"
#include "kernels/formats/mx.h"

namespace atl {
namespace {

StatusOr<int> from_status(Status s) {
  return s;
}

// ATOLL_ASSIGN_OR_RETURN from a StatusOr built out of an OK Status: it must not return OK and
// skip the rest of the function.
Status assign_then_mark(Status s, bool* reached_end) {
  ATOLL_ASSIGN_OR_RETURN(int v, from_status(std::move(s)));
  (void)v;
  *reached_end = true;
  return Status::Ok();
}

TEST(StatusOr, HoldsTheValue) {
  StatusOr<std::string> s(std::string("abc"));
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s.status().ok());
  EXPECT_EQ(*s, "abc");
  EXPECT_EQ(s->size(), 3u);
  EXPECT_EQ(std::move(s).value(), "abc");
}

TEST(StatusOr, HoldsTheError) {
  StatusOr<int> s = from_status(NotFound("no such file"));
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(s.status().message(), "no such file");
}

TEST(StatusOr, MadeFromAnOkStatusIsAnInternalError) {
  StatusOr<int> s = from_status(Status::Ok());
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInternal);
  EXPECT_NE(s.status().message().find("OK Status without a value"), std::string::npos)
      << s.status().message();
}

TEST(StatusOr, AssignOrReturnDoesNotReturnOkWithoutAValue) {
  bool reached_end = false;
  Status s = assign_then_mark(Status::Ok(), &reached_end);
  EXPECT_FALSE(s.ok()) << "ATOLL_ASSIGN_OR_RETURN returned OK without a value";
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_FALSE(reached_end);
}

TEST(StatusOr, AssignOrReturnPassesErrorsAndValues) {
  bool reached_end = false;
  Status s = assign_then_mark(DataLoss("checksum"), &reached_end);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_FALSE(reached_end);
  auto make = []() -> StatusOr<int> { return 7; };
  auto run = [&](bool* reached) -> Status {
    ATOLL_ASSIGN_OR_RETURN(int v, make());
    *reached = v == 7;
    return Status::Ok();
  };
  EXPECT_TRUE(run(&reached_end).ok());
  EXPECT_TRUE(reached_end);
}

// Death tests fork: the threadsafe style re-executes the binary, safe with OpenMP threads.
class StatusOrDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(StatusOrDeathTest, ReadingTheValueOfAnErrorAborts) {
  StatusOr<int> err = from_status(NotFound("no such file"));
  const StatusOr<int>& cerr = err;
  EXPECT_DEATH((void)*err, "StatusOr holding an error was read.*NOT_FOUND: no such file");
  EXPECT_DEATH((void)*cerr, "StatusOr holding an error was read.*NOT_FOUND: no such file");
  EXPECT_DEATH((void)err.value(), "NOT_FOUND: no such file");
  EXPECT_DEATH((void)std::move(err).value(), "NOT_FOUND: no such file");
  StatusOr<std::string> serr(Unavailable("peer down"));
  EXPECT_DEATH((void)serr->size(), "UNAVAILABLE: peer down");
}

class CheckDeathTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

TEST_F(CheckDeathTest, CheckPrintsWhereAndWhatThenAborts) {
  int n = 3;
  ATOLL_CHECK(n == 3, "never printed");
  EXPECT_DEATH(ATOLL_CHECK(n == 4, "n is " + std::to_string(n)),
               "internal error: .*status_test\\.cc:[0-9]+: check `n == 4` failed: n is 3");
}

TEST_F(CheckDeathTest, InternalErrorAborts) {
  EXPECT_DEATH(internal_error("broken invariant"), "atoll: internal error: broken invariant");
}

TEST_F(CheckDeathTest, DieExitsWithCodeOne) {
  EXPECT_EXIT(die("bench: no device"), ::testing::ExitedWithCode(1), "bench: no device");
}

// The size checks of the format converters stay in release builds (they were asserts): a
// mismatched output span would be written out of bounds.
TEST_F(CheckDeathTest, FormatConvertersCheckSpanSizes) {
  std::vector<float> in(64, 1.0f);
  std::vector<uint16_t> bf16(63);
  EXPECT_DEATH(kernels::formats::quantize_bf16(in, bf16),
               "check .*in.size\\(\\) == out.size\\(\\)");
  std::vector<kernels::formats::BlockMxfp8> blocks(kernels::formats::mx_num_blocks(in.size()) - 1);
  EXPECT_DEATH(kernels::formats::quantize_mxfp8(in, blocks), "check .*mx_num_blocks");
  std::vector<kernels::formats::BlockMxfp8> one(1);
  EXPECT_DEATH(kernels::formats::dequantize_mxfp8(one, in), "check .*out.size\\(\\) <=");
}

}  // namespace
}  // namespace atl
