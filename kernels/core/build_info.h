// What this build of Atoll is: its version and the commit it was built from (written at build
// time by cmake/build_info.cmake), for `atoll --version`, a node's Join and the coordinator's
// log, so that two builds of one version can be told apart.
#pragma once

#include <string>

namespace atl {

const char* atoll_version();      // the project version, e.g. "0.1.0"
const char* build_commit();       // abbreviated commit id, "-modified" appended when the
                                  // tracked files differed from it; "unknown" outside git
const char* build_commit_date();  // the commit's date, YYYY-MM-DD ("" when unknown)

// "atoll 0.1.0+8acc369" (what a node sends as JoinRequest.client_version).
inline std::string build_label() {
  return std::string("atoll ") + atoll_version() + "+" + build_commit();
}

}  // namespace atl
