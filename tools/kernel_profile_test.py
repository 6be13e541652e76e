#!/usr/bin/python3
"""tools/kernel_profile.py on a CSV in Nsight Compute's raw format (the
lines ncu prints before the table, the header, the units row, launches of
mangled and demangled kernels): per-kernel totals, the whole profile, the
steps split at a kernel's launches, one step alone, and the errors.

Usage: kernel_profile_test.py KERNEL_PROFILE_PY"""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = sys.argv[1]
HEADER = ('"ID","Kernel Name","Block Size","gpu__time_duration.sum",'
          '"dram__bytes_read.sum","dram__bytes_write.sum"')
UNITS = '"","","","nsecond","byte","byte"'
EMBED = "_ZN7ringmoe4cuda11EmbedKernelENS0_12DeviceWeightEPKilPf"
PRODUCT = ("_ZN7ringmoe4cuda18FusedProductKernelILNS_7kernels10WeightTypeE1E"
           "Li1EEEvNS0_12DeviceWeightEPKfibPf")
NORM = "void ringmoe::cuda::RmsNormF32Kernel(const float *, float *)"


def launch(i, name, ns, read, write):
    return f'"{i}","{name}","(256, 1, 1)","{ns:,}","{read:,}","{write}"'


class KernelProfileTest(unittest.TestCase):
    def setUp(self):
        # Two steps (each: embed, product, norm) after a stray norm.
        lines = ["==PROF== Connected to process 1", HEADER, UNITS,
                 launch(0, NORM, 1000, 0, 0)]
        for step in range(2):
            lines += [launch(1 + 3 * step, EMBED, 2000, 1000, 0),
                      launch(2 + 3 * step, PRODUCT, 10000 * (step + 1),
                             30_000_000, 0),
                      launch(3 + 3 * step, NORM, 4000, 500, 500)]
        self.dir = tempfile.TemporaryDirectory()
        self.csv = os.path.join(self.dir.name, "ncu.csv")
        with open(self.csv, "w") as f:
            f.write("\n".join(lines) + "\n")

    def tearDown(self):
        self.dir.cleanup()

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, self.csv, *args],
                              capture_output=True, text=True, timeout=60)

    def rows(self, out):
        """The table's rows by their first column."""
        return {line.split()[0]: line.split()[1:]
                for line in out.splitlines() if line.strip()}

    def test_totals_per_kernel_largest_first(self):
        run = self.run_script("--ceiling_GBps", "3000")
        self.assertEqual(run.returncode, 0, run.stderr)
        lines = [l for l in run.stdout.splitlines() if l.strip()]
        self.assertTrue(lines[1].startswith("FusedProductKernel"), lines)
        rows = self.rows(run.stdout)
        # launches, total ms, mean us, DRAM MB, GB/s, ÷ ceiling
        self.assertEqual(rows["FusedProductKernel"][:4],
                         ["2", "0.030", "15.00", "60.00"])
        self.assertEqual(rows["FusedProductKernel"][4:], ["2000.0", "0.667"])
        self.assertEqual(rows["RmsNormF32Kernel"][:2], ["3", "0.009"])
        self.assertEqual(rows["EmbedKernel"][:2], ["2", "0.004"])
        self.assertEqual(rows["all"][:2], ["7", "0.043"])

    def test_steps_split_at_the_step_kernel(self):
        run = self.run_script("--step_kernel", "EmbedKernel")
        self.assertEqual(run.returncode, 0, run.stderr)
        steps = run.stdout.split("\n\n")[1]
        rows = self.rows(steps)
        # step, launches, total us, DRAM MB: the stray norm is in no step.
        self.assertEqual(rows["0"][:3], ["3", "16.0", "30.00"])
        self.assertEqual(rows["1"][:3], ["3", "26.0", "30.00"])

    def test_one_step_alone(self):
        run = self.run_script("--step_kernel", "EmbedKernel", "--step", "1")
        self.assertEqual(run.returncode, 0, run.stderr)
        rows = self.rows(run.stdout)
        self.assertEqual(rows["step"], ["1"])
        self.assertEqual(rows["FusedProductKernel"][:2], ["1", "0.020"])
        self.assertEqual(rows["all"][:2], ["3", "0.026"])
        self.assertNotIn("\n\n", run.stdout.strip())

    def test_errors_name_the_problem(self):
        run = self.run_script("--step", "0")
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("--step needs --step_kernel", run.stderr)
        run = self.run_script("--step_kernel", "EmbedKernel", "--step", "2")
        self.assertIn("the profile has 2 steps", run.stderr)
        run = self.run_script("--step_kernel", "NoSuchKernel")
        self.assertIn("no launch of NoSuchKernel", run.stderr)
        with open(self.csv, "w") as f:
            f.write("a,b\n1,2\n")
        run = self.run_script()
        self.assertIn("no 'Kernel Name' column", run.stderr)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
