"""cc_proto_library replacement over Debian's protoc and grpc_cpp_plugin.

Bazel's native proto rules would download protobuf's sources; a genrule that
calls the installed compiler keeps the build offline and matches the
libprotobuf the binaries link against.
"""

def ringmoe_cc_proto_library(name, srcs, deps = [], grpc = False, **kwargs):
    """C++ messages (and gRPC stubs with grpc = True) for .proto files.

    Imports are resolved from the workspace root: `import "proto/x.proto";`.

    Args:
      name: the cc_library's name.
      srcs: .proto files in this package.
      deps: other ringmoe_cc_proto_library targets whose protos these import.
      grpc: also generate gRPC service stubs.
      **kwargs: passed to the cc_library.
    """
    pkg = native.package_name()
    outs = []
    for src in srcs:
        stem = src[:-len(".proto")]
        outs += [stem + ".pb.h", stem + ".pb.cc"]
        if grpc:
            outs += [stem + ".grpc.pb.h", stem + ".grpc.pb.cc"]
    proto_files = " ".join(["%s/%s" % (pkg, s) if pkg else s for s in srcs])
    grpc_flags = "--grpc_out=$(GENDIR) --plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin" if grpc else ""
    native.genrule(
        name = name + "_protoc",
        srcs = srcs + [d + "_protos" for d in deps],
        outs = outs,
        cmd = "/usr/bin/protoc -I. --cpp_out=$(GENDIR) %s %s" % (grpc_flags, proto_files),
    )
    native.filegroup(name = name + "_protos", srcs = srcs + [d + "_protos" for d in deps])
    system = ["@system_libs//:protobuf"] + (["@system_libs//:grpc"] if grpc else [])
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + system,
        **kwargs
    )
