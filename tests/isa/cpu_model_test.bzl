"""cpu_model_test: a binary, built optimised, run as a test on an emulated CPU.

The kernels choose their instruction-set path at run time (AVX-512, AVX2 or
scalar), so a test run exercises only the paths of the machine it runs on.
This rule runs a test under Debian's qemu-user with a chosen CPU model
(`qemu-x86_64 -cpu Haswell-v4`: AVX2 without AVX-512; `Nehalem-v2`: no AVX,
the scalar path) or natively (`cpu = "native"`), always from an optimised
build (-c opt -O3, as users run it: code generation, inlining and the
linker's choice among duplicate symbols differ from -O0). The test is told
which path to expect through RINGMOE_EXPECT_KERNEL_PATH, so a CPU model
that failed to expose its features cannot pass silently on another path.

The binary is a test (it passes when it exits 0) or a program run with
`binary_args` whose standard output must match every `expect_stdout`
pattern (grep -E).
"""

def _optimised_impl(settings, _attr):
    copts = settings["//command_line_option:copt"]
    return {
        "//command_line_option:compilation_mode": "opt",
        "//command_line_option:copt": copts if "-O3" in copts else copts + ["-O3"],
    }

_optimised = transition(
    implementation = _optimised_impl,
    inputs = ["//command_line_option:copt"],
    outputs = [
        "//command_line_option:compilation_mode",
        "//command_line_option:copt",
    ],
)

def _shell_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"

def _cpu_model_test_impl(ctx):
    target = ctx.attr.binary[0]
    binary = target[DefaultInfo].files_to_run.executable
    runner = "" if ctx.attr.cpu == "native" else "qemu-x86_64 -cpu {} ".format(ctx.attr.cpu)
    lines = ["#!/usr/bin/env bash", "set -u"]
    if runner:
        lines += [
            "if ! command -v qemu-x86_64 >/dev/null; then",
            "  echo 'qemu-x86_64 not found: run tools/setup.sh (Debian package qemu-user)' >&2",
            "  exit 1",
            "fi",
        ]
    if ctx.attr.expect_path:
        lines.append("export RINGMOE_EXPECT_KERNEL_PATH=" + ctx.attr.expect_path)
    for name, value in sorted(ctx.attr.env.items()):
        lines.append("export {}={}".format(name, _shell_quote(value)))
    command = runner + binary.short_path + "".join([" " + _shell_quote(a) for a in ctx.attr.binary_args])
    if not ctx.attr.expect_stdout:
        lines.append(command + ' "$@"')
    else:
        lines += [
            "out=$(" + command + ")",
            "status=$?",
            'printf "%s\\n" "$out"',
            'if [[ $status -ne 0 ]]; then echo "exit status $status" >&2; exit 1; fi',
        ]
        for pattern in ctx.attr.expect_stdout:
            lines += [
                "if ! grep -Eq -- {} <<<\"$out\"; then".format(_shell_quote(pattern)),
                "  echo {} >&2".format(_shell_quote("FAIL: output does not match " + pattern)),
                "  exit 1",
                "fi",
            ]
    script = ctx.actions.declare_file(ctx.label.name + ".sh")
    ctx.actions.write(script, "\n".join(lines) + "\n", is_executable = True)
    runfiles = ctx.runfiles(files = [binary]).merge(target[DefaultInfo].default_runfiles)
    for data in ctx.attr.data:
        runfiles = runfiles.merge(data[DefaultInfo].default_runfiles)
        runfiles = runfiles.merge(ctx.runfiles(transitive_files = data[DefaultInfo].files))
    return [DefaultInfo(executable = script, runfiles = runfiles)]

cpu_model_test = rule(
    implementation = _cpu_model_test_impl,
    test = True,
    attrs = {
        "binary": attr.label(
            cfg = _optimised,
            executable = True,
            mandatory = True,
            doc = "The test or program to run.",
        ),
        "cpu": attr.string(
            mandatory = True,
            doc = "A qemu-x86_64 -cpu model, or \"native\".",
        ),
        "expect_path": attr.string(
            doc = "The kernel path the binary must find (scalar, avx2, avx512).",
        ),
        "binary_args": attr.string_list(
            doc = "Arguments passed to the binary.",
        ),
        "env": attr.string_dict(
            doc = "Environment variables set for the binary.",
        ),
        "expect_stdout": attr.string_list(
            doc = "Patterns (grep -E) the standard output must match.",
        ),
        "data": attr.label_list(
            allow_files = True,
            doc = "Files the binary reads.",
        ),
        "_allowlist_function_transition": attr.label(
            default = "@bazel_tools//tools/allowlists/function_transition_allowlist",
        ),
    },
)
