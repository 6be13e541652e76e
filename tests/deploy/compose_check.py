"""deploy/docker-compose.yml as podman-compose (Debian's, 1.0) reads it: the
four services, every ${VARIABLE} substituted, the ringmoe service's ports
and read-only model volume, and the two-rank ringmoe-ep service: the same
image with RINGMOE_RANKS=2, the container's ports published on host ports
of its own. Parsing only: nothing is created or run.

Usage: compose_check.py COMPOSE_FILE
"""
import sys

from podman_compose import podman_compose as compose


def main():
    sys.argv = ["podman-compose", "--dry-run", "-f", sys.argv[1], "ps"]
    compose._parse_args()
    compose._parse_compose_file()
    services = {c["service_name"]: c for c in compose.containers}
    problems = []
    if sorted(services) != ["grafana", "prometheus", "ringmoe", "ringmoe-ep"]:
        problems.append("services %s" % sorted(services))
    for name, c in services.items():
        for key, value in (c.get("environment") or {}).items():
            if "${" in str(value):
                problems.append("%s: %s=%s not substituted" % (name, key, value))
    ringmoe = services.get("ringmoe", {})
    if sorted(ringmoe.get("ports", [])) != ["8000:8000", "8001:8001", "8002:8002"]:
        problems.append("ringmoe ports %s" % ringmoe.get("ports"))
    if not any(v.endswith(":/models:ro") for v in ringmoe.get("volumes", [])):
        problems.append("ringmoe volumes %s" % ringmoe.get("volumes"))
    ep = services.get("ringmoe-ep", {})
    if (ep.get("environment") or {}).get("RINGMOE_RANKS") != "2":
        problems.append("ringmoe-ep environment %s" % ep.get("environment"))
    if ep.get("image") != ringmoe.get("image"):
        problems.append("ringmoe-ep image %s, ringmoe %s" % (ep.get("image"), ringmoe.get("image")))
    ep_ports = dict(p.split(":") for p in ep.get("ports", []))
    if sorted(ep_ports.values()) != ["8000", "8001", "8002"] or \
            set(ep_ports) & {p.split(":")[0] for p in ringmoe.get("ports", [])}:
        problems.append("ringmoe-ep ports %s" % ep.get("ports"))
    if not any(v.endswith(":/models:ro") for v in ep.get("volumes", [])):
        problems.append("ringmoe-ep volumes %s" % ep.get("volumes"))
    for p in problems:
        print("compose_check: %s" % p, file=sys.stderr)
    if problems:
        sys.exit(1)
    print("compose_check: services %s parsed" % " ".join(sorted(services)))


if __name__ == "__main__":
    main()
