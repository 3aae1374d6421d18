"""Rules shared by the end-to-end verbs tests (tests/verbs, srq, extapi, mw, ...)."""

# What every verbs e2e script runs: the daemon, the provider, metaroce-ctl.
E2E_VERBS_DATA = [
    "//firmware-model/daemon:metaroced",
    "//provider:libmetaroce-rdmav34.so",
    "//tools:metaroce-ctl",
]

# The launcher (metaroce-run) and its interposer, for launch_a/launch_b.
E2E_LAUNCHER_DATA = [
    "//kmod-shim/launcher:libmetaroce-preload.so",
    "//kmod-shim/launcher:metaroce-run",
]

def verbs_program(name, srcs, deps = []):
    """A verbs program a test script runs (tests/lib/verbs_setup.h)."""
    native.cc_binary(
        name = name,
        testonly = True,
        srcs = srcs,
        deps = ["//tests/lib:verbs_setup", "//third_party:ibverbs"] + deps,
    )

def verbs_e2e_test(name, script, data = [], launcher = True, ios = None, env = {}, tags = []):
    """An sh_test of `script` between two daemons (tests/lib/netns.sh).

    With `ios` (e.g. ["packet", "xdp"]), one test per packet I/O, named
    name_<io>, with MROCE_E2E_IO set. Needs root; CI is root.
    """
    all_data = data + E2E_VERBS_DATA + (E2E_LAUNCHER_DATA if launcher else [])
    variants = [(name + "_" + io, dict(env, MROCE_E2E_IO = io)) for io in ios] if ios else [(name, env)]
    for test_name, test_env in variants:
        native.sh_test(
            name = test_name,
            size = "large",
            srcs = [script],
            data = all_data,
            env = test_env,
            tags = ["exclusive", "local", "root"] + tags,
            deps = ["//tests/lib:e2e"],
        )
