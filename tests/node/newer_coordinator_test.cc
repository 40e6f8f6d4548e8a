// A coordinator built from a newer schema: a Join answer or a Task carrying settings this node's
// schema does not know is refused in one line naming the fields, instead of being trained as if
// they were not there (node/coordinator_client.cc, transport/unknown_fields.h).
#include <google/protobuf/unknown_field_set.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "node/coordinator_client.h"
#include "tests/node/node_test_util.h"

namespace atl::node {
namespace {

namespace pb = atoll_pb::v1;

// The unknown-field set a newer schema's fields land in (protobuf 3 keeps them when parsing).
google::protobuf::UnknownFieldSet* unknown(google::protobuf::Message& m) {
  return m.GetReflection()->MutableUnknownFields(&m);
}


// What this node's parser makes of `message` once a newer coordinator has added `extra` (raw
// protobuf bytes of fields this schema does not have) to its serialization.
template <typename M>
M as_received(const M& message, const std::string& extra) {
  M received;
  EXPECT_TRUE(received.ParseFromString(message.SerializeAsString() + extra));
  return received;
}

// Field 22 of TrainSpec (varint 1), inside JoinResponse.train (field 4, length-delimited): the
// bytes a coordinator whose TrainSpec has a 22nd field would send for a non-default setting.
std::string train_field_22() {
  pb::TrainSpec extra;
  unknown(extra)->AddVarint(22, 1);
  const std::string inner = extra.SerializeAsString();
  return std::string("\x22", 1) + static_cast<char>(inner.size()) + inner;
}

class NewerCoordinator final : public testing::UnreachableCalls {
 public:
  NewerCoordinator(std::string join_extra, std::string task_extra)
      : join_extra_(std::move(join_extra)), task_extra_(std::move(task_extra)) {}
  Status join(const pb::JoinRequest&, pb::JoinResponse* resp) override {
    *resp = as_received(testing::small_join(), join_extra_);
    return Status::Ok();
  }
  Status next_task(const pb::NextTaskRequest&, pb::Task* task) override {
    pb::Task t;
    t.set_kind(pb::Task::TRAIN);
    t.set_round(1);
    t.set_inner_steps(5);
    *task = as_received(t, task_extra_);
    return Status::Ok();
  }

 private:
  std::string join_extra_, task_extra_;
};

TEST(NewerCoordinator, AJoinAnswerWithAnUnknownTrainSettingIsRefusedNamingIt) {
  CoordinatorClient link(std::make_unique<NewerCoordinator>(train_field_22(), ""));
  auto joined = link.join();
  ASSERT_FALSE(joined.ok());
  EXPECT_EQ(joined.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(joined.status().message(),
            "the answer to Join carries settings this atoll does not know (field train.22): the "
            "coordinator runs a newer atoll; install the same version here");
}

TEST(NewerCoordinator, ATaskWithUnknownFieldsIsRefusedAndAKnownOneIsTaken) {
  // Task field 14 (varint) and field 15 (length-delimited "x").
  CoordinatorClient newer(std::make_unique<NewerCoordinator>("", std::string("\x70\x01\x7a\x01x", 5)));
  auto task = newer.next_task(0, 0);
  ASSERT_FALSE(task.ok());
  EXPECT_NE(task.status().message().find("the task carries settings this atoll does not know "
                                         "(fields 14, 15): the coordinator runs"),
            std::string::npos)
      << task.status().message();

  // Task.kind = 9 (field 1, varint): an enum value proto3 keeps in the field itself.
  CoordinatorClient new_kind(std::make_unique<NewerCoordinator>("", std::string("\x08\x09", 2)));
  auto kind = new_kind.next_task(0, 0);
  ASSERT_FALSE(kind.ok());
  EXPECT_EQ(kind.status().message(),
            "the task carries settings this atoll does not know (field kind = 9): the "
            "coordinator runs a newer atoll; install the same version here");

  CoordinatorClient same(std::make_unique<NewerCoordinator>("", ""));
  ASSERT_TRUE(same.join().ok());
  auto known = same.next_task(0, 0);
  ASSERT_TRUE(known.ok()) << known.status().to_string();
  EXPECT_EQ(known->inner_steps(), 5u);
}

}  // namespace
}  // namespace atl::node
