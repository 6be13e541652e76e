"""The deploy/ files parse and agree with the server's contracts: gRPC on
8001 and metrics on 8002, grpc.health.v1 probes, a GPU request, a
ServiceMonitor that names the Service's metrics port, a non-root image with
a health check and a model volume. No container engine or cluster runs
here, so this reads the files the way those tools would."""
import json
import os
import re
import shlex
import unittest

import yaml

GRPC_PORT, METRICS_PORT, HTTP_PORT = 8001, 8002, 8000


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def k8s_objects():
    objects = {}
    for name in ["deployment", "service", "servicemonitor", "pdb"]:
        for doc in load_all("deploy/k8s/%s.yaml" % name):
            objects[doc["kind"]] = doc
    return objects


def parse_dockerfile(path):
    """[(stage_index, INSTRUCTION, argument text)] with continuation lines
    joined and comments dropped, as Docker's parser reads them."""
    instructions, current, stage = [], "", -1
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not current and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if current and line.lstrip().startswith("#"):
                continue  # comment lines inside a continued instruction
            if line.endswith("\\"):
                current += line[:-1] + " "
                continue
            current += line
            keyword, _, rest = current.strip().partition(" ")
            keyword = keyword.upper()
            if keyword == "FROM":
                stage += 1
            instructions.append((stage, keyword, rest.strip()))
            current = ""
    return instructions


class KubernetesTest(unittest.TestCase):
    def setUp(self):
        self.objects = k8s_objects()

    def container(self):
        spec = self.objects["Deployment"]["spec"]["template"]["spec"]
        self.assertEqual(len(spec["containers"]), 1)
        return spec, spec["containers"][0]

    def test_every_manifest_parses_with_kind_and_api_version(self):
        for kind, api in [("Deployment", "apps/v1"), ("Service", "v1"),
                          ("ServiceMonitor", "monitoring.coreos.com/v1"),
                          ("PodDisruptionBudget", "policy/v1")]:
            self.assertIn(kind, self.objects)
            self.assertEqual(self.objects[kind]["apiVersion"], api)
            self.assertEqual(self.objects[kind]["metadata"]["name"], "ringmoe")

    def test_kustomization_lists_the_manifests(self):
        (k,) = load_all("deploy/k8s/kustomization.yaml")
        self.assertEqual(sorted(k["resources"]), ["deployment.yaml", "pdb.yaml",
                                                  "service.yaml", "servicemonitor.yaml"])

    def test_container_ports(self):
        _, c = self.container()
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports, {"grpc": GRPC_PORT, "metrics": METRICS_PORT,
                                 "http": HTTP_PORT})
        env = {e["name"]: e.get("value") for e in c["env"]}
        self.assertEqual(env["RINGMOE_HTTP_PORT"], str(HTTP_PORT))
        self.assertEqual(env["RINGMOE_GRPC_PORT"], str(GRPC_PORT))
        self.assertEqual(env["RINGMOE_METRICS_PORT"], str(METRICS_PORT))
        self.assertTrue(env["RINGMOE_MODEL"].startswith("/models"))

    def test_probes_are_native_grpc_on_the_grpc_port(self):
        _, c = self.container()
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"]:
            self.assertIn(probe, c)
            self.assertEqual(c[probe]["grpc"]["port"], GRPC_PORT, probe)
        # Slow model loads: the startup probe must allow minutes.
        startup = c["startupProbe"]
        self.assertGreaterEqual(startup["periodSeconds"] * startup["failureThreshold"], 300)

    def test_gpu_request_and_limit(self):
        _, c = self.container()
        self.assertEqual(c["resources"]["requests"]["nvidia.com/gpu"], 1)
        self.assertEqual(c["resources"]["limits"]["nvidia.com/gpu"], 1)

    def test_non_root_and_model_volume(self):
        spec, c = self.container()
        self.assertTrue(spec["securityContext"]["runAsNonRoot"])
        self.assertNotEqual(spec["securityContext"]["runAsUser"], 0)
        self.assertFalse(c["securityContext"]["allowPrivilegeEscalation"])
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        self.assertEqual(mounts["models"]["mountPath"], "/models")
        volumes = {v["name"]: v for v in spec["volumes"]}
        self.assertIn("claimName", volumes["models"]["persistentVolumeClaim"])

    def test_termination_grace_exceeds_the_servers_drain(self):
        spec, _ = self.container()
        self.assertGreater(spec["terminationGracePeriodSeconds"], 30)

    def test_service_and_service_monitor_agree(self):
        svc, mon = self.objects["Service"], self.objects["ServiceMonitor"]
        ports = {p["name"]: p for p in svc["spec"]["ports"]}
        self.assertEqual(ports["grpc"]["port"], GRPC_PORT)
        self.assertEqual(ports["metrics"]["port"], METRICS_PORT)
        self.assertEqual(ports["http"]["port"], HTTP_PORT)
        _, c = self.container()
        container_ports = {p["name"] for p in c["ports"]}
        for p in ports.values():
            self.assertIn(p["targetPort"], container_ports)
        (endpoint,) = mon["spec"]["endpoints"]
        self.assertEqual(endpoint["port"], "metrics")
        self.assertEqual(endpoint["path"], "/metrics")
        labels = svc["metadata"]["labels"]
        for k, v in mon["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(labels.get(k), v)

    def test_selectors_match_the_pod_labels(self):
        pod_labels = self.objects["Deployment"]["spec"]["template"]["metadata"]["labels"]
        selectors = [self.objects["Deployment"]["spec"]["selector"]["matchLabels"],
                     self.objects["Service"]["spec"]["selector"],
                     self.objects["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"]]
        for selector in selectors:
            for k, v in selector.items():
                self.assertEqual(pod_labels.get(k), v)


class ExpertParallelKubernetesTest(unittest.TestCase):
    """deploy/k8s/expert-parallel: an MPIJob (the Kubeflow MPI Operator's
    custom resource, so k8s_schema_check.py only parses it) and a Service
    (schema-checked there). This checks the MPIJob's structure and that it
    agrees with the single-pod Deployment and with the entrypoint."""

    def setUp(self):
        self.objects = {d["kind"]: d for name in ["mpijob", "service"]
                        for d in load_all("deploy/k8s/expert-parallel/%s.yaml" % name)}
        self.job = self.objects["MPIJob"]
        self.specs = self.job["spec"]["mpiReplicaSpecs"]
        deployment = k8s_objects()["Deployment"]
        self.deployment_pod = deployment["spec"]["template"]["spec"]
        (self.deployment_container,) = self.deployment_pod["containers"]

    def pod(self, replica_type):
        spec = self.specs[replica_type]["template"]["spec"]
        (container,) = spec["containers"]
        return spec, container

    def test_kinds_and_kustomization(self):
        self.assertEqual(self.job["apiVersion"], "kubeflow.org/v2beta1")
        self.assertEqual(self.objects["Service"]["apiVersion"], "v1")
        (k,) = load_all("deploy/k8s/expert-parallel/kustomization.yaml")
        self.assertEqual(sorted(k["resources"]), ["mpijob.yaml", "service.yaml"])
        # The default kustomization stays the single-pod Deployment.
        (default,) = load_all("deploy/k8s/kustomization.yaml")
        self.assertFalse(any("expert-parallel" in r or "mpijob" in r
                             for r in default["resources"]))

    def test_replicas_slots_and_ranks(self):
        spec = self.job["spec"]
        self.assertEqual(spec["mpiImplementation"], "OpenMPI")
        self.assertEqual(spec["slotsPerWorker"], 1)
        self.assertTrue(spec["runLauncherAsWorker"])
        self.assertEqual(set(self.specs), {"Launcher", "Worker"})
        self.assertEqual(self.specs["Launcher"]["replicas"], 1)
        # Ranks: the launcher (runLauncherAsWorker) plus slots on each worker.
        ranks = 1 + self.specs["Worker"]["replicas"] * spec["slotsPerWorker"]
        self.assertEqual(ranks, 2)
        _, launcher = self.pod("Launcher")
        env = {e["name"]: e.get("value") for e in launcher["env"]}
        self.assertEqual(env["RINGMOE_RANKS"], str(ranks))
        # The operator mounts its keys where the image's user has its home.
        self.assertEqual(spec["sshAuthMountPath"], "/home/ringmoe/.ssh")

    def test_launcher_runs_mpirun_with_expert_parallel(self):
        """The launcher runs the entrypoint, which turns RINGMOE_RANKS into
        mpirun -np N with itself as every rank, each adding --expert_parallel."""
        _, launcher = self.pod("Launcher")
        self.assertEqual(launcher["command"], ["/opt/ringmoe/bin/entrypoint.sh"])
        with open("deploy/entrypoint.sh") as f:
            entrypoint = f.read()
        self.assertRegex(entrypoint, r'mpirun "\$\{mpi\[@\]\}" "\$self"')
        self.assertIn('mpi=(-np "$ranks" --bind-to none)', entrypoint)
        self.assertIn("args+=(--expert_parallel)", entrypoint)
        # Remote ranks get their settings through mpirun -x, not the pod's env.
        self.assertIn('mpi+=(-x "$name")', entrypoint)

    def test_launcher_serves_like_the_deployment(self):
        """Rank 0 (the launcher) has the Deployment's ports, probes, GPU,
        security context, model volume and grace period."""
        spec, c = self.pod("Launcher")
        d = self.deployment_container
        for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe",
                    "resources", "securityContext", "volumeMounts", "image"):
            self.assertEqual(c[key], d[key], key)
        env = {e["name"]: e.get("value") for e in c["env"]}
        d_env = {e["name"]: e.get("value") for e in d["env"]}
        for name in ("RINGMOE_MODEL", "RINGMOE_GRPC_PORT", "RINGMOE_METRICS_PORT",
                     "RINGMOE_HTTP_PORT"):
            self.assertEqual(env[name], d_env[name], name)
        for key in ("securityContext", "volumes", "tolerations",
                    "terminationGracePeriodSeconds"):
            self.assertEqual(spec[key], self.deployment_pod[key], key)

    def test_worker_runs_sshd_with_a_gpu_and_the_model(self):
        spec, c = self.pod("Worker")
        self.assertEqual(c["command"][0], "/usr/sbin/sshd")
        self.assertIn("/opt/ringmoe/etc/sshd_config", c["command"])
        self.assertEqual(c["ports"], [{"name": "ssh", "containerPort": 2222,
                                       "protocol": "TCP"}])
        self.assertEqual(c["readinessProbe"]["tcpSocket"]["port"], 2222)
        # No ringmoe port here: a gRPC probe would fail on every rank but 0.
        for probe in ("startupProbe", "livenessProbe"):
            self.assertNotIn(probe, c)
        d = self.deployment_container
        for key in ("resources", "securityContext", "volumeMounts", "image"):
            self.assertEqual(c[key], d[key], key)
        for key in ("securityContext", "volumes", "tolerations"):
            self.assertEqual(spec[key], self.deployment_pod[key], key)

    def test_image_configures_ssh_on_the_workers_port(self):
        with open("deploy/Dockerfile") as f:
            dockerfile = f.read()
        for want in ("openmpi-bin", "openssh-server", "'Port 2222'",
                     "'    Port 2222'", "/opt/ringmoe/etc/sshd_config",
                     "--home-dir /home/ringmoe"):
            self.assertIn(want, dockerfile)

    def test_service_selects_the_launcher_only(self):
        svc = self.objects["Service"]
        selector = svc["spec"]["selector"]
        launcher = self.specs["Launcher"]["template"]["metadata"]["labels"]
        worker = self.specs["Worker"]["template"]["metadata"]["labels"]
        self.assertTrue(all(launcher.get(k) == v for k, v in selector.items()))
        self.assertFalse(all(worker.get(k) == v for k, v in selector.items()))
        # Nor the single-pod Deployment's pods, nor they this Service.
        pod = k8s_objects()["Deployment"]["spec"]["template"]["metadata"]["labels"]
        self.assertFalse(all(pod.get(k) == v for k, v in selector.items()))
        ports = {p["name"]: p["port"] for p in svc["spec"]["ports"]}
        self.assertEqual(ports, {"grpc": GRPC_PORT, "metrics": METRICS_PORT, "http": HTTP_PORT})
        _, c = self.pod("Launcher")
        names = {p["name"] for p in c["ports"]}
        for p in svc["spec"]["ports"]:
            self.assertIn(p["targetPort"], names)


class ComposeTest(unittest.TestCase):
    def setUp(self):
        (self.compose,) = load_all("deploy/docker-compose.yml")
        self.services = self.compose["services"]

    def test_services(self):
        self.assertEqual(set(self.services), {"ringmoe", "ringmoe-ep", "prometheus", "grafana"})

    def test_ringmoe_ports_gpu_and_model_volume(self):
        r = self.services["ringmoe"]
        self.assertEqual(r["build"]["dockerfile"], "deploy/Dockerfile")
        self.assertEqual(set(r["ports"]), {"%d:%d" % (GRPC_PORT, GRPC_PORT),
                                           "%d:%d" % (METRICS_PORT, METRICS_PORT),
                                           "%d:%d" % (HTTP_PORT, HTTP_PORT)})
        (device,) = r["deploy"]["resources"]["reservations"]["devices"]
        self.assertEqual(device["driver"], "nvidia")
        self.assertIn("gpu", device["capabilities"])
        # SOURCE:/models[:ro], where SOURCE may be "${VAR:-default}".
        self.assertTrue(any(re.search(r":/models(:ro)?$", v) for v in r["volumes"]))

    def test_expert_parallel_service(self):
        """ringmoe-ep: the same image with two ranks, only under its profile,
        rank 0's ports (the image's, as the entrypoint passes them) on host
        ports that do not collide with the single-rank service."""
        r, ep = self.services["ringmoe"], self.services["ringmoe-ep"]
        self.assertEqual(ep["image"], r["image"])
        self.assertEqual(ep["profiles"], ["expert-parallel"])
        env = ep["environment"]
        self.assertEqual(env["RINGMOE_RANKS"], "2")
        self.assertIn("cuda:local", env["RINGMOE_DEVICE"])
        # Ports: the container side is the server's default flags (the
        # entrypoint's defaults, no RINGMOE_*_PORT override here).
        for var in ("RINGMOE_GRPC_PORT", "RINGMOE_METRICS_PORT", "RINGMOE_HTTP_PORT"):
            self.assertNotIn(var, env)
        ports = dict(p.split(":") for p in ep["ports"])
        self.assertEqual(sorted(int(c) for c in ports.values()),
                         sorted([GRPC_PORT, METRICS_PORT, HTTP_PORT]))
        single_host_ports = {p.split(":")[0] for p in r["ports"]}
        self.assertFalse(set(ports) & single_host_ports)
        # Nothing else in the file takes these host ports either.
        for name, service in self.services.items():
            if name != "ringmoe-ep":
                taken = {p.split(":")[0] for p in service.get("ports", [])}
                self.assertFalse(set(ports) & taken, name)
        (device,) = ep["deploy"]["resources"]["reservations"]["devices"]
        self.assertEqual(device["count"], 2)  # one GPU per rank
        self.assertTrue(any(re.search(r":/models:ro$", v) for v in ep["volumes"]))
        self.assertIn("shm_size", ep)
        # The same drain margin as the single rank: rank 0 drains (30 s)
        # before the others stop.
        self.assertEqual(ep["stop_grace_period"], r["stop_grace_period"])

    def test_mounted_config_files_exist(self):
        for service in ("prometheus", "grafana"):
            for volume in self.services[service]["volumes"]:
                source = volume.split(":")[0]
                if source.startswith("./"):
                    self.assertTrue(os.path.exists("deploy/" + source[2:]), volume)

    def test_prometheus_scrapes_the_ringmoe_service(self):
        (cfg,) = load_all("deploy/prometheus/prometheus.yml")
        targets = [t for job in cfg["scrape_configs"] for sc in job["static_configs"]
                   for t in sc["targets"]]
        self.assertEqual(targets, ["ringmoe:%d" % METRICS_PORT])
        mounts = self.services["prometheus"]["volumes"]
        self.assertIn("./prometheus/prometheus.yml:/etc/prometheus/prometheus.yml:ro", mounts)
        self.assertIn("./prometheus/rules.yml:/etc/prometheus/rules.yml:ro", mounts)


class GrafanaTest(unittest.TestCase):
    def test_provisioning(self):
        (ds,) = load_all("deploy/grafana/provisioning/datasources/prometheus.yml")
        (source,) = ds["datasources"]
        self.assertEqual(source["type"], "prometheus")
        self.assertEqual(source["url"], "http://prometheus:9090")
        (dash,) = load_all("deploy/grafana/provisioning/dashboards/ringmoe.yml")
        (provider,) = dash["providers"]
        self.assertEqual(provider["type"], "file")
        self.assertEqual(provider["options"]["path"], "/var/lib/grafana/dashboards")

    def test_dashboard_panels(self):
        with open("deploy/grafana/dashboards/ringmoe.json") as f:
            d = json.load(f)
        self.assertEqual(d["uid"], "ringmoe")
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        titles = {p["title"] for p in d["panels"]}
        for want in ["Requests by status", "Queue and running sequences", "Time to first token",
                     "Inter-token latency", "End-to-end latency", "Tokens per second",
                     "Batch size", "KV cache usage", "Ring bytes moved", "Ring stall",
                     "Prefetch hit rate", "Expert cache hit rate"]:
            self.assertIn(want, titles)
        exprs = " ".join(t["expr"] for p in d["panels"] for t in p.get("targets", []))
        for q in ["0.5", "0.99"]:
            self.assertIn("histogram_quantile(%s, sum by (le) (rate("
                          "ringmoe_time_to_first_token_seconds_bucket" % q, exprs)
        # Panels must not overlap on Grafana's 24-column grid.
        cells = set()
        for p in d["panels"]:
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24)
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells, p["title"])
                    cells.add((x, y))


class DockerfileTest(unittest.TestCase):
    """hadolint is not packaged for Debian; these are the properties the
    deployment depends on."""

    def setUp(self):
        self.ins = parse_dockerfile("deploy/Dockerfile")
        self.last_stage = max(s for s, _, _ in self.ins)

    def final(self, keyword):
        return [arg for s, k, arg in self.ins if s == self.last_stage and k == keyword]

    def test_known_instructions_only(self):
        known = {"ARG", "FROM", "SHELL", "ENV", "WORKDIR", "COPY", "RUN", "VOLUME", "EXPOSE",
                 "USER", "HEALTHCHECK", "STOPSIGNAL", "ENTRYPOINT", "CMD", "LABEL"}
        for _, k, _ in self.ins:
            self.assertIn(k, known)

    def test_two_stages_build_on_debian_run_on_cuda(self):
        froms = [arg for _, k, arg in self.ins if k == "FROM"]
        self.assertEqual(len(froms), 2)
        self.assertTrue(froms[0].startswith("debian:12 AS build"), froms[0])
        # The runtime base is a build argument (debian:12-slim for the CPU
        # variant, tools/test_container.sh); its default is NVIDIA's image.
        self.assertEqual(froms[1], "${RUNTIME_BASE} AS runtime")
        args = dict(a.split("=", 1) for _, k, a in self.ins if k == "ARG" and "=" in a)
        self.assertTrue(args["CUDA_VERSION"].startswith("13."))
        self.assertTrue(
            args["RUNTIME_BASE"].startswith("nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu"),
            args["RUNTIME_BASE"])
        copies = self.final("COPY")
        self.assertTrue(any(c.startswith("--from=build ") for c in copies))

    def test_build_stage_runs_setup_and_bazel(self):
        runs = " ".join(arg for s, k, arg in self.ins if s == 0 and k == "RUN")
        self.assertIn("bash tools/setup.sh", runs)
        self.assertIn("bazel build", runs)
        self.assertIn("//server:ringmoe_server", runs)
        self.assertIn("//clients/cli:ringmoe", runs)
        self.assertIn("deploy/bundle_libs.sh", runs)

    def test_runtime_user_is_not_root(self):
        (user,) = self.final("USER")
        self.assertNotIn(user.split(":")[0], ("root", "0"))

    def test_ports_volume_entrypoint_and_healthcheck(self):
        (expose,) = self.final("EXPOSE")
        self.assertEqual(sorted(expose.split()),
                         sorted([str(GRPC_PORT), str(METRICS_PORT), str(HTTP_PORT)]))
        (volume,) = self.final("VOLUME")
        self.assertEqual(volume, "/models")
        (entrypoint,) = self.final("ENTRYPOINT")
        self.assertEqual(json.loads(entrypoint), ["/opt/ringmoe/bin/entrypoint.sh"])
        (health,) = self.final("HEALTHCHECK")
        options, _, cmd = health.partition(" CMD ")
        self.assertEqual(json.loads(cmd), ["/opt/ringmoe/bin/healthcheck.sh"])
        opts = dict(o.lstrip("-").split("=") for o in shlex.split(options))
        self.assertEqual(set(opts), {"interval", "timeout", "start-period", "retries"})
        # healthcheck.sh's own deadline (3 s) must fit in Docker's timeout.
        self.assertGreater(int(re.match(r"(\d+)s", opts["timeout"]).group(1)), 3)
        env = " ".join(self.final("ENV"))
        self.assertIn("RINGMOE_GRPC_PORT=%d" % GRPC_PORT, env)
        self.assertIn("RINGMOE_METRICS_PORT=%d" % METRICS_PORT, env)


if __name__ == "__main__":
    unittest.main()
