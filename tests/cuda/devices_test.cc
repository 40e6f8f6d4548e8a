// --devices parsing (runs everywhere) and the NCCL worker group (needs >= 2 GPUs).
#include "kernels/cuda/devices.h"

#include "cuda/cuda_test_util.h"
#include "kernels/cuda/nccl_group.h"
#include "kernels/cuda/ops.h"

namespace atl::kernels::cuda {
namespace {

TEST(DevicesTest, ParsesListsInOrder) {
  auto one = parse_devices("cuda:0");
  ASSERT_TRUE(one.ok()) << one.status().to_string();
  EXPECT_EQ(*one, std::vector<int>({0}));
  auto two = parse_devices("cuda:1,cuda:0,cuda:12");
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(*two, std::vector<int>({1, 0, 12}));
}

TEST(DevicesTest, RejectsBadListsWithOneClearLine) {
  for (const char* bad : {"", "cuda:", "gpu:0", "cuda:0,", "cuda:-1", "cuda:0,cuda:0", " cuda:0",
                          "cuda:1x", "cuda:99999", "cpu"}) {
    auto r = parse_devices(bad);
    ASSERT_FALSE(r.ok()) << "'" << bad << "' was accepted";
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("cuda:0,cuda:1"), std::string::npos)
        << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
  EXPECT_TRUE(validate_devices({0, 1}, 2).ok());
  const Status st = validate_devices({0, 2}, 2);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("cuda:2 does not exist"), std::string::npos) << st.message();
}

TEST(DevicesTest, OpenWorkerDevicesSaysWhatIsWrong) {
  auto bad = open_worker_devices("cuda:0,gpu:1");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  auto n = device_count();
  if (!n.ok()) {
    // This machine: the flag is well-formed but there is nothing to run on.
    auto none = open_worker_devices("cuda:0");
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.status().code(), StatusCode::kUnavailable);
    EXPECT_NE(none.status().message().find("no CUDA device"), std::string::npos)
        << none.status().message();
    return;
  }
  auto missing = open_worker_devices("cuda:" + std::to_string(*n));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);
}

// Two GPUs as one worker: each holds its own gradient; after the all-reduce both hold the mean.
TEST(NcclGroupTest, AllReduceMeanOverTwoGpus) {
  auto n = device_count();
  if (!n.ok()) GTEST_SKIP() << "no CUDA device: " << n.status().message();
  if (*n < 2) GTEST_SKIP() << "needs 2 CUDA devices, this machine has " << *n;
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  auto group = NcclGroup::create({0, 1});
  ASSERT_TRUE(group.ok()) << group.status().to_string();
  const size_t len = 100003;
  std::vector<DeviceBuffer<float>> bufs;
  std::vector<float*> ptrs;
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE((*group)->context(r).make_current().ok());
    auto b = DeviceBuffer<float>::alloc(len);
    ASSERT_TRUE(b.ok());
    std::vector<float> h(len);
    for (size_t i = 0; i < len; ++i) h[i] = float(r + 1) * float(i % 1000);  // r0: x, r1: 2x
    ASSERT_TRUE(b->upload(h.data(), len).ok());
    ptrs.push_back(b->data());
    bufs.push_back(std::move(b).value());
  }
  ASSERT_TRUE((*group)->all_reduce_mean(ptrs, len).ok());
  ASSERT_TRUE((*group)->synchronize().ok());
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE((*group)->context(r).make_current().ok());
    std::vector<float> h(len);
    ASSERT_TRUE(bufs[size_t(r)].download(h.data(), len).ok());
    for (size_t i = 0; i < len; i += 997) EXPECT_EQ(h[i], 1.5f * float(i % 1000)) << i;
  }
  EXPECT_EQ((*group)->all_reduce_mean({ptrs[0]}, len).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace atl::kernels::cuda
