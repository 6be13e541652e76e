"""A libFuzzer target and the test that replays its corpus under Bazel."""

def ringmoe_fuzz_target(name, deps, replay_deps = [], hdrs = [], data = []):
    """<name>_fuzzer (the target's library) and <name>_fuzz_replay_test.

    The library holds LLVMFuzzerTestOneInput from <name>_fuzzer.cc; the test
    links it with replay.cc and <name>_replay_test.cc and reads
    corpus/<name>/ and, when present, <name>.dict. tools/fuzz.sh builds the
    same <name>_fuzzer.cc with clang's libFuzzer instead.
    """
    native.cc_library(
        name = name + "_fuzzer",
        testonly = True,
        srcs = [name + "_fuzzer.cc"],
        hdrs = hdrs,
        data = data,
        deps = deps,
        alwayslink = True,
    )
    native.cc_test(
        name = name + "_fuzz_replay_test",
        size = "medium",
        srcs = [name + "_replay_test.cc"],
        data = native.glob(["corpus/" + name + "/**", name + ".dict"]),
        deps = [
            ":" + name + "_fuzzer",
            ":replay",
        ] + replay_deps,
    )
