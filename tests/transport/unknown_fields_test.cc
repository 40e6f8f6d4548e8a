// transport/unknown_fields.h: the paths of fields a newer peer added, inside nested and repeated
// messages, at most 8 listed.
#include "transport/unknown_fields.h"

#include <google/protobuf/unknown_field_set.h>
#include <gtest/gtest.h>

#include "transport/proto/atoll.pb.h"

namespace atl::transport {
namespace {

namespace pb = atoll_pb::v1;

// The unknown-field set a newer schema's fields land in (protobuf 3 keeps them when parsing).
google::protobuf::UnknownFieldSet* unknown(google::protobuf::Message& m) {
  return m.GetReflection()->MutableUnknownFields(&m);
}


TEST(UnknownFields, NamesNestedAndRepeatedPathsAndNothingWhenThereAreNone) {
  pb::JoinResponse j;
  j.set_node_id("site-1");
  j.mutable_train()->set_lr(1e-3);
  EXPECT_EQ(unknown_field_paths(j), "");
  EXPECT_TRUE(refuse_unknown_fields(j, "x", "y").ok());

  unknown(j)->AddVarint(30, 1);
  unknown(*j.mutable_train()->mutable_secagg())->AddFixed32(9, 7);
  unknown(*j.mutable_model())->AddLengthDelimited(23, "gelu");
  // Top level first, then the set message fields in field-number order (model 3, train 4).
  EXPECT_EQ(unknown_field_paths(j), "30, model.23, train.secagg.9");

  pb::MetricsReport report;
  report.add_metrics()->set_name("loss");
  unknown(*report.add_metrics())->AddVarint(5, 2);
  EXPECT_EQ(unknown_field_paths(report), "metrics[1].5");

  // An enum value the schema does not list stays in its field (proto3): named with its value.
  pb::Task task;
  task.set_kind(pb::Task::SCORE);
  EXPECT_EQ(unknown_field_paths(task), "");
  task.set_kind(static_cast<pb::Task::Kind>(9));
  EXPECT_EQ(unknown_field_paths(task), "kind = 9");
}

TEST(UnknownFields, ListsEightAndSaysThereAreMore) {
  pb::Task t;
  for (int f = 100; f < 110; ++f) unknown(t)->AddVarint(f, 1);
  EXPECT_EQ(unknown_field_paths(t), "100, 101, 102, 103, 104, 105, 106, 107, ...");
  const Status st = refuse_unknown_fields(t, "the task", "the coordinator");
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message().rfind("the task carries settings this atoll does not know (fields 100, ",
                               0),
            0u)
      << st.message();
}

}  // namespace
}  // namespace atl::transport
