// The saved state of a round (node/round_snapshot.h) when it is one copyable value: used by the
// inner steps (InnerState) and the sync strategies (SyncState) alike.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "kernels/core/status.h"

namespace atl::node {

// A Base (InnerState or SyncState) holding a copy of T.
template <class Base, class T>
struct SavedValue final : Base {
  explicit SavedValue(T v) : value(std::move(v)) {}
  T value;
};

template <class Base, class T>
std::unique_ptr<Base> save_value(T value) {
  return std::make_unique<SavedValue<Base, T>>(std::move(value));
}

// The T inside a state made by save_value<Base, T>(); INTERNAL naming `saver` when another kind
// of step or strategy made it.
template <class T, class Base>
StatusOr<const T*> saved_value(const Base& state, const char* saver) {
  const auto* s = dynamic_cast<const SavedValue<Base, T>*>(&state);
  if (s == nullptr)
    return Internal(std::string("restore_state: the state was saved by another ") + saver);
  return &s->value;
}

}  // namespace atl::node
