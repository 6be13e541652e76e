"""CUDA build helpers: if_cuda, cuda_compatible and the cuda_library macro."""

load("@local_config_cuda//:defs.bzl", "CUDA_AVAILABLE", "CUDA_PATH")

def if_cuda(if_true, if_false = []):
    """Selects if_true in builds that include CUDA, else if_false."""
    if not CUDA_AVAILABLE:
        return if_false
    return select({
        "//third_party/cuda:cpu_only": if_false,
        "//conditions:default": if_true,
    })

def cuda_compatible():
    """target_compatible_with value that skips a target in CPU-only builds."""
    return if_cuda([], ["@platforms//:incompatible"])

# Machine code for A100 (sm_80) and H100/H200 (sm_90a), plus compute_90 PTX so
# newer GPUs can JIT the kernels; sm_90a alone under --define=cuda_archs=hopper.
_HOPPER_ARCH_FLAGS = "-gencode=arch=compute_90a,code=sm_90a"
_NVCC_ARCH_FLAGS = " ".join([
    "-gencode=arch=compute_80,code=sm_80",
    _HOPPER_ARCH_FLAGS,
    "-gencode=arch=compute_90,code=compute_90",
])

def _nvcc_command(src, arch_flags, nvcc_flags):
    return " ".join([
        CUDA_PATH + "/bin/nvcc",
        "-c -std=c++17 -O3 -lineinfo -Xcompiler -fPIC",
        "--expt-relaxed-constexpr",
        "--Werror all-warnings -Xcompiler -Wall,-Werror",
        arch_flags,
        "-I. -I$(GENDIR)",
        " ".join(nvcc_flags),
        "-o $@ $(location %s)" % src,
    ])

def cuda_library(name, srcs, hdrs = [], cuda_hdrs = [], deps = [], nvcc_flags = [], **kwargs):
    """Compiles .cu files with nvcc into a cc_library that cc targets depend on.

    Args:
      name: the cc_library's name.
      srcs: .cu files.
      hdrs: public headers (host-callable API), visible to nvcc too.
      cuda_hdrs: further headers the .cu files include (e.g. .cuh).
      deps: cc dependencies of the resulting library.
      nvcc_flags: extra nvcc flags.
      **kwargs: passed to the cc_library.
    """
    objects = []
    for src in srcs:
        stem = src[:-len(".cu")] if src.endswith(".cu") else src
        obj = "_cuda_objs/%s/%s.pic.o" % (name, stem)
        native.genrule(
            name = "%s_nvcc_%s" % (name, stem.replace("/", "_")),
            srcs = [src] + hdrs + cuda_hdrs,
            outs = [obj],
            cmd = select({
                "//third_party/cuda:hopper_only": _nvcc_command(src, _HOPPER_ARCH_FLAGS, nvcc_flags),
                "//conditions:default": _nvcc_command(src, _NVCC_ARCH_FLAGS, nvcc_flags),
            }),
            target_compatible_with = cuda_compatible(),
            tags = ["cuda"],
        )
        objects.append(obj)
    native.cc_library(
        name = name,
        srcs = objects,
        hdrs = hdrs,
        deps = deps + ["@local_config_cuda//:cudart"],
        target_compatible_with = cuda_compatible(),
        **kwargs
    )
