// Whole-file reads and atomic writes (kernels/core/file_io.h): what each bad path says.
#include "kernels/core/file_io.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "tools/temp_dir.h"

namespace atl {
namespace {

TEST(FileIo, ReadsWhatWasWrittenAtomically) {
  testing::TempDir dir;
  const std::string path = dir / "a.bin";
  const std::string bytes("x\0y\xff", 4);
  ASSERT_TRUE(write_file_atomic(path, bytes).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  auto back = read_file(path);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, bytes);
  auto bounded = read_file_bounded(path, 4);
  ASSERT_TRUE(bounded.ok());
  EXPECT_EQ(*bounded, bytes);
  auto over = read_file_bounded(path, 3);
  EXPECT_EQ(over.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(over.status().message(), path + " is 4 bytes, more than the 3 allowed");
}

TEST(FileIo, MissingFileIsNotFound) {
  testing::TempDir dir;
  auto r = read_file(dir / "nothing");
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(r.status().message(),
            "cannot open " + (dir / "nothing") + ": No such file or directory");
}

// A directory where a file belongs (a model folder for a checkpoint) is one line, not an abort.
TEST(FileIo, DirectoryIsRefusedInOneLine) {
  testing::TempDir dir;
  for (auto r : {read_file(dir.path()), read_file_bounded(dir.path(), 1 << 20)}) {
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message(), dir.path() + " is a directory, not a file");
  }
}

// A pipe has no size until its end: read_file reads it to the end; read_file_bounded refuses it.
TEST(FileIo, PipeIsReadToItsEnd) {
  testing::TempDir dir;
  const std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << std::string(100000, 'z'); });
  auto r = read_file(fifo);
  writer.join();
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(*r, std::string(100000, 'z'));
}

// A write that cannot finish leaves neither the target nor its temporary file behind.
TEST(FileIo, FailedWriteLeavesNoTemporaryFile) {
  testing::TempDir dir;
  const std::string target = dir / "occupied";
  std::filesystem::create_directory(target);  // rename(file, directory) fails
  Status s = write_file_atomic(target, "bytes");
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find("cannot rename " + target + ".tmp to " + target), std::string::npos)
      << s.message();
  EXPECT_FALSE(std::filesystem::exists(target + ".tmp"));
  EXPECT_TRUE(std::filesystem::is_directory(target));
}

}  // namespace
}  // namespace atl
