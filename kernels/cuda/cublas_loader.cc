#include "kernels/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

namespace ringmoe::cuda {
namespace {

struct Loaded {
  Cublas api{};
  bool ok = false;
  std::string error;
};

template <typename Fn>
bool Resolve(void* library, const char* symbol, Fn* fn, std::string* error) {
  *fn = reinterpret_cast<Fn>(dlsym(library, symbol));
  if (*fn == nullptr) *error = std::string("cuBLAS has no ") + symbol;
  return *fn != nullptr;
}

Loaded Load() {
  Loaded loaded;
  const std::string soname =
      std::string("libcublas.so.") + std::to_string(CUBLAS_VER_MAJOR);
  std::vector<std::string> candidates = {soname};
  if (const char* cuda_path = std::getenv("CUDA_PATH")) {
    candidates.push_back(std::string(cuda_path) + "/lib64/" + soname);
  }
  candidates.push_back("/usr/local/cuda/lib64/" + soname);
  void* library = nullptr;
  for (const std::string& path : candidates) {
    library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
  }
  if (library == nullptr) {
    const char* why = dlerror();
    loaded.error = "cannot load " + soname + ": " + (why ? why : "not found");
    return loaded;
  }
  Cublas& api = loaded.api;
  loaded.ok =
      Resolve(library, "cublasCreate_v2", &api.create, &loaded.error) &&
      Resolve(library, "cublasDestroy_v2", &api.destroy, &loaded.error) &&
      Resolve(library, "cublasSetStream_v2", &api.set_stream, &loaded.error) &&
      Resolve(library, "cublasSetMathMode", &api.set_math_mode,
              &loaded.error) &&
      Resolve(library, "cublasSgemm_v2", &api.sgemm, &loaded.error);
  return loaded;
}

}  // namespace

const Cublas* LoadCublas(std::string* error) {
  static const Loaded* const loaded = new Loaded(Load());
  if (!loaded->ok && error != nullptr) *error = loaded->error;
  return loaded->ok ? &loaded->api : nullptr;
}

}  // namespace ringmoe::cuda
