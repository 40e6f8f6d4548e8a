#include "kernels/cuda/nccl_group.h"

#include <string>

#include "kernels/cuda/devices.h"

#if defined(ATOLL_HAVE_NCCL)
#include <nccl.h>

#include "kernels/cuda/shared_library.h"
#endif

namespace atl::kernels::cuda {

#if defined(ATOLL_HAVE_NCCL)

namespace {

#define ATOLL_NCCL_STRINGIFY_VALUE(x) #x
#define ATOLL_NCCL_STRINGIFY(x) ATOLL_NCCL_STRINGIFY_VALUE(x)
constexpr const char* kNcclSoname = "libnccl.so." ATOLL_NCCL_STRINGIFY(NCCL_MAJOR);

// The NCCL functions Atoll calls, from the library loaded on first use (like cuBLASLt,
// kernels/cuda/cublaslt_library.h): each with the C function's exact type.
struct Nccl {
  decltype(&::ncclCommInitAll) CommInitAll = nullptr;
  decltype(&::ncclCommDestroy) CommDestroy = nullptr;
  decltype(&::ncclAllReduce) AllReduce = nullptr;
  decltype(&::ncclGroupStart) GroupStart = nullptr;
  decltype(&::ncclGroupEnd) GroupEnd = nullptr;
  decltype(&::ncclGetErrorString) GetErrorString = nullptr;
  Status status = Status::Ok();
};

Nccl load_nccl_once() {
  Nccl t;
  std::string first_error;
  void* lib = open_shared_library(kNcclSoname, ATOLL_NCCL_LIBRARY_DIR, &first_error);
  if (lib == nullptr) {
    t.status = Unavailable(std::string("cannot load ") + kNcclSoname + " (" + first_error +
                           "): install NCCL or put its directory on LD_LIBRARY_PATH, or pass "
                           "one device");
    return t;
  }
  std::string why;
  const bool all = resolve_symbol(lib, "ncclCommInitAll", t.CommInitAll, &why) &&
                   resolve_symbol(lib, "ncclCommDestroy", t.CommDestroy, &why) &&
                   resolve_symbol(lib, "ncclAllReduce", t.AllReduce, &why) &&
                   resolve_symbol(lib, "ncclGroupStart", t.GroupStart, &why) &&
                   resolve_symbol(lib, "ncclGroupEnd", t.GroupEnd, &why) &&
                   resolve_symbol(lib, "ncclGetErrorString", t.GetErrorString, &why);
  if (!all) t.status = Unavailable(std::string(kNcclSoname) + " cannot be used: " + why);
  return t;
}

const Nccl& nccl() {
  static const Nccl once = load_nccl_once();
  return once;
}

Status check_nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return Status::Ok();
  return Internal(std::string("NCCL error in ") + what + ": " + nccl().GetErrorString(r));
}

}  // namespace

bool nccl_available() {
  return true;
}

StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::create(const std::vector<int>& devices) {
  if (devices.empty()) return InvalidArgument("NcclGroup: no devices given");
  ATOLL_RETURN_IF_ERROR(nccl().status);
  std::unique_ptr<NcclGroup> g(new NcclGroup());
  for (int d : devices) {
    ATOLL_ASSIGN_OR_RETURN(auto ctx, Context::create(d));
    g->contexts_.push_back(std::move(ctx));
  }
  std::vector<ncclComm_t> comms(devices.size(), nullptr);
  ATOLL_RETURN_IF_ERROR(
      check_nccl(nccl().CommInitAll(comms.data(), static_cast<int>(devices.size()), devices.data()),
                 "ncclCommInitAll"));
  for (ncclComm_t c : comms) g->comms_.push_back(c);
  return g;
}

NcclGroup::~NcclGroup() {
  for (void* c : comms_) {
    if (c != nullptr) (void)nccl().CommDestroy(static_cast<ncclComm_t>(c));
  }
}

Status NcclGroup::all_reduce(const std::vector<float*>& bufs, size_t n, bool mean) {
  if (bufs.size() != contexts_.size()) {
    return InvalidArgument("all_reduce: " + std::to_string(bufs.size()) + " buffers for " +
                           std::to_string(contexts_.size()) + " devices");
  }
  if (n == 0) return Status::Ok();
  ATOLL_RETURN_IF_ERROR(check_nccl(nccl().GroupStart(), "ncclGroupStart"));
  Status first;
  for (size_t r = 0; r < bufs.size(); ++r) {
    const Status st =
        check_nccl(nccl().AllReduce(bufs[r], bufs[r], n, ncclFloat32, mean ? ncclAvg : ncclSum,
                                    static_cast<ncclComm_t>(comms_[r]), contexts_[r]->stream()),
                   "ncclAllReduce");
    if (!st.ok() && first.ok()) first = st;
  }
  // The group must be closed even after an error, or NCCL stays inside it.
  const Status end = check_nccl(nccl().GroupEnd(), "ncclGroupEnd");
  ATOLL_RETURN_IF_ERROR(first);
  return end;
}

#else  // !ATOLL_HAVE_NCCL

bool nccl_available() {
  return false;
}

StatusOr<std::unique_ptr<NcclGroup>> NcclGroup::create(const std::vector<int>& devices) {
  return FailedPrecondition(
      "this build has no NCCL, so a worker cannot span several GPUs; "
      "install NCCL (libnccl-dev) and rebuild, or pass one device");
}
NcclGroup::~NcclGroup() = default;
Status NcclGroup::all_reduce(const std::vector<float*>&, size_t, bool) {
  return FailedPrecondition("this build has no NCCL");
}

#endif

Status NcclGroup::all_reduce_mean(const std::vector<float*>& bufs, size_t n) {
  return all_reduce(bufs, n, true);
}
Status NcclGroup::all_reduce_sum(const std::vector<float*>& bufs, size_t n) {
  return all_reduce(bufs, n, false);
}
StatusOr<std::unique_ptr<NcclGroup>> open_worker_devices(std::string_view spec) {
  ATOLL_ASSIGN_OR_RETURN(const std::vector<int> ids, parse_devices(spec));
  auto n = device_count();
  if (!n.ok()) {
    return Unavailable("--devices " + std::string(spec) +
                       ": no CUDA device: " + n.status().message());
  }
  ATOLL_RETURN_IF_ERROR(validate_devices(ids, *n));
  return NcclGroup::create(ids);
}

Status NcclGroup::synchronize() {
  for (auto& c : contexts_) ATOLL_RETURN_IF_ERROR(c->synchronize());
  return Status::Ok();
}

}  // namespace atl::kernels::cuda
