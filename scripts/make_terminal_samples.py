"""Write a terminal-heavy sample set for distill (§18): seeded, deterministic, our own rows.

    python scripts/make_terminal_samples.py [--rows 24] [--seed 27] [--out data_samples]

Each row is an agent fixing something in a repository through a ``terminal`` and a
``read_file`` tool. Its tool outputs are what such runs really print: pytest runs with
colours, progress dots and tracebacks; pip installs with carriage-return progress bars;
npm installs with spinners and deprecation warnings; docker builds (BuildKit plain
progress); ``kubectl get pods -o json``; polling loops (rollout status, health checks,
heartbeats with timestamps); the same file read twice. Written as Hermes ShareGPT JSONL
(``terminal_hermes.jsonl``), OpenAI messages (``terminal_openai.jsonl``) and
LLaMA-Factory ShareGPT (``terminal_llamafactory.json``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_dialect_samples import llamafactory_sharegpt, openai_messages
from make_samples import TOOLS

GREEN, RED, YELLOW, BOLD, RESET = "\x1b[32m", "\x1b[31m", "\x1b[33m", "\x1b[1m", "\x1b[0m"
PACKAGES = [("numpy", "1.26.4", 18.3), ("pandas", "2.2.2", 13.0), ("pydantic", "2.7.1", 0.4),
            ("torch", "2.3.0", 779.1), ("fastapi", "0.111.0", 0.09), ("uvicorn", "0.29.0", 0.06),
            ("sqlalchemy", "2.0.30", 3.1), ("httpx", "0.27.0", 0.07), ("orjson", "3.10.3", 0.14),
            ("scipy", "1.13.0", 38.6)]
MODULES = ["api/routes.py", "api/auth.py", "core/models.py", "core/cache.py",
           "workers/queue.py", "db/migrations.py", "utils/retry.py", "services/billing.py"]
SYSTEM = ("You are a function calling AI model. You are provided with function signatures "
          "within <tools></tools> XML tags.\n<tools>\n" + json.dumps(TOOLS) + "\n</tools>\n"
          "For each function call return a json object with function name and arguments "
          "within <tool_call></tool_call> XML tags.")


def pytest_run(rng: random.Random, repo: str) -> str:
    files = rng.sample(MODULES, 6)
    total = sum(rng.randint(12, 60) for _ in files)
    lines = [f"{BOLD}{'=' * 29} test session starts {'=' * 30}{RESET}",
             "platform linux -- Python 3.11.9, pytest-8.2.0, pluggy-1.5.0",
             f"rootdir: /home/dev/{repo}", "configfile: pyproject.toml",
             "plugins: asyncio-0.23.6, cov-5.0.0, xdist-3.6.1", f"collected {total} items", ""]
    failures = []
    done = 0
    for path in files:
        n = rng.randint(12, 60)
        dots = "".join(f"{RED}F{RESET}" if rng.random() < 0.03 else f"{GREEN}.{RESET}"
                       for _ in range(n))
        done += n
        lines.append(f"tests/test_{Path(path).stem}.py {dots} "
                     f"[{min(100, done * 100 // total):3d}%]")
        if "F" in dots:
            failures.append(path)
    lines.append("")
    for path in failures:
        stem = Path(path).stem
        line = rng.randint(40, 400)
        lines += [f"{RED}{BOLD}_____ test_{stem}_handles_timeout _____{RESET}", "",
                  f"    def test_{stem}_handles_timeout(client, monkeypatch):",
                  f"        monkeypatch.setattr(settings, 'REQUEST_TIMEOUT', {rng.randint(1, 9)})",
                  f">       resp = client.get('/v1/{stem}/{rng.randint(1000, 9999)}')", "",
                  f"tests/test_{stem}.py:{rng.randint(10, 120)}: ",
                  "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _",
                  f"src/{repo}/{path}:{line}: in fetch",
                  "    return await self._pool.request(method, url, timeout=timeout)",
                  f"{RED}E   TimeoutError: request to http://127.0.0.1:{rng.randint(8000, 8999)}"
                  f"/internal/{stem} timed out after {rng.randint(2, 30)}s{RESET}", ""]
    passed = total - len(failures)
    lines.append(f"{RED}=== {len(failures)} failed, {passed} passed, "
                 f"{rng.randint(1, 9)} warnings in {rng.uniform(4, 90):.2f}s ==={RESET}"
                 if failures else f"{GREEN}=== {passed} passed in {rng.uniform(4, 90):.2f}s ==="
                 f"{RESET}")
    return "\n".join(lines)


def pip_install(rng: random.Random) -> str:
    out = []
    for name, version, size in rng.sample(PACKAGES, rng.randint(3, 7)):
        wheel = f"{name}-{version}-cp311-cp311-manylinux_2_17_x86_64.whl"
        out.append(f"Collecting {name}=={version}")
        out.append(f"  Downloading {wheel} ({size} MB)")
        bar = []
        steps = rng.randint(6, 20)
        for k in range(1, steps + 1):
            got = size * k / steps
            filled = "━" * (40 * k // steps)
            bar.append(f"     {filled:<40} {got:.1f}/{size} MB "
                       f"{rng.uniform(5, 60):.1f} MB/s eta 0:00:{max(0, steps - k):02d}")
        out.append("\r".join(bar))
    names = " ".join(f"{n}-{v}" for n, v, _ in PACKAGES[:4])
    out.append("Installing collected packages: " + names)
    out.append("Successfully installed " + names)
    return "\n".join(out)


def npm_install(rng: random.Random) -> str:
    spin = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
    frames = [f"{spin[k % 10]} reify:{rng.choice(['lodash', 'rxjs', 'typescript', 'esbuild'])}: "
              f"timing reifyNode:node_modules/{rng.choice(['@babel/core', 'webpack', 'vite'])} "
              f"Completed in {rng.randint(10, 900)}ms" for k in range(rng.randint(30, 80))]
    warns = [f"npm WARN deprecated {p}: This module is not supported, and leaks memory. Do not "
             "use it. Check out lru-cache if you want a good and tested way to coalesce async "
             "requests by a key value, which is much more comprehensive and powerful."
             for p in ["inflight@1.0.6"] * rng.randint(1, 3)]
    warns += ["npm WARN deprecated glob@7.2.3: Glob versions prior to v9 are no longer "
              "supported"] * rng.randint(3, 6)
    return ("\r".join(frames) + "\r\x1b[K\n" + "\n".join(warns)
            + f"\n\nadded {rng.randint(800, 1500)} packages, and audited "
            f"{rng.randint(1500, 1600)} packages in {rng.randint(20, 90)}s\n\n"
            f"{rng.randint(100, 250)} packages are looking for funding\n"
            "  run `npm fund` for details\n\nfound 0 vulnerabilities")


def docker_build(rng: random.Random, repo: str) -> str:
    lines = ["#0 building with \"default\" instance using docker driver", "",
             "#1 [internal] load build definition from Dockerfile",
             "#1 transferring dockerfile: 1.23kB done", "#1 DONE 0.0s"]
    step = 5
    lines += [f"#{step} [2/7] RUN apt-get update && apt-get install -y --no-install-recommends "
              "build-essential libpq-dev"]
    t = 0.2
    for k in range(rng.randint(20, 50)):
        t += rng.uniform(0.01, 0.3)
        lines.append(f"#{step} {t:.3f} Get:{k + 1} http://deb.debian.org/debian bookworm/main "
                     f"amd64 {rng.choice(['libpq5', 'gcc-12', 'make', 'libc6-dev', 'dpkg-dev'])}"
                     f" amd64 {rng.randint(1, 15)}.{rng.randint(0, 9)}-{rng.randint(1, 5)} "
                     f"[{rng.randint(20, 9000)} kB]")
    for k in range(rng.randint(20, 60)):
        t += 0.05
        lines.append(f"#{step} {t:.3f} Setting up package {k} ...")
    lines += [f"#{step} DONE {t:.1f}s", "",
              "#9 exporting to image", "#9 exporting layers 3.4s done",
              f"#9 writing image sha256:{rng.getrandbits(256):064x} done",
              f"#9 naming to registry.internal:5000/{repo}:{rng.randint(100, 999)} done",
              "#9 DONE 3.5s"]
    return "\n".join(lines)


def kubectl_pods(rng: random.Random, repo: str) -> str:
    items = []
    for k in range(rng.randint(3, 9)):
        pod = f"{repo}-{rng.getrandbits(36):09x}-{rng.getrandbits(20):05x}"
        items.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "staging",
                         "uid": f"{rng.getrandbits(32):08x}-{rng.getrandbits(16):04x}-4"
                                f"{rng.getrandbits(12):03x}-a{rng.getrandbits(12):03x}-"
                                f"{rng.getrandbits(48):012x}",
                         "labels": {"app": repo, "pod-template-hash": f"{rng.getrandbits(36):09x}"},
                         "creationTimestamp": f"2024-11-{rng.randint(10, 28)}T0{k}:12:44Z"},
            "spec": {"containers": [{"name": repo, "image": f"registry.internal:5000/{repo}:"
                                     f"{rng.randint(100, 999)}",
                                     "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                                     "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}}}],
                     "nodeName": f"node-{rng.randint(1, 12)}"},
            "status": {"phase": rng.choice(["Running", "Running", "Pending", "CrashLoopBackOff"]),
                       "podIP": f"10.42.{rng.randint(0, 9)}.{rng.randint(2, 250)}",
                       "restartCount": rng.randint(0, 7),
                       "startTime": f"2024-11-{rng.randint(10, 28)}T0{k}:12:50Z"}})
    return json.dumps({"apiVersion": "v1", "items": items, "kind": "List",
                       "metadata": {"resourceVersion": ""}}, indent=4)


def rollout_poll(rng: random.Random, repo: str) -> str:
    waiting = (f"Waiting for deployment \"{repo}\" rollout to finish: 1 of 3 updated replicas "
               "are available...")
    lines = [waiting] * rng.randint(10, 40)
    lines += [f"deployment \"{repo}\" successfully rolled out"]
    return "\n".join(lines)


def health_poll(rng: random.Random) -> str:
    port = rng.randint(8000, 8999)
    n = rng.randint(15, 50)
    lines = [f"attempt {k}/60: curl: (7) Failed to connect to localhost port {port} after 0 ms: "
             "Connection refused" for k in range(1, n)]
    lines.append(f"attempt {n}/60: HTTP/1.1 200 OK")
    return "\n".join(lines)


def heartbeat_log(rng: random.Random) -> str:
    lines = []
    for k in range(rng.randint(20, 60)):
        worker, depth = rng.randint(1, 4), rng.randint(0, 3)
        lines.append(f"2024-11-23T10:{15 + k // 60:02d}:{k % 60:02d}.{rng.randint(0, 999):03d}Z "
                     f"INFO worker-{worker} heartbeat ok queue_depth={depth}")
    lines.append("2024-11-23T10:16:02.554Z ERROR worker-2 job 7781 failed: "
                 "psycopg.OperationalError: connection to server at \"10.42.3.17\", port 5432 "
                 "failed: FATAL: too many connections for role \"app\"")
    return "\n".join(lines)


def source_file(rng: random.Random, path: str) -> str:
    body = [f'"""{Path(path).stem}: request handling for the {rng.choice(["v1", "v2"])} API."""',
            "", "from __future__ import annotations", "", "import asyncio",
            "import logging", "", "log = logging.getLogger(__name__)", ""]
    for k in range(rng.randint(8, 20)):
        limit = rng.randint(10, 500)
        body += [f"async def handle_{k}(request, timeout: float = {rng.randint(1, 30)}.0):",
                 f"    key = request.headers.get('X-Request-Id', 'req_{rng.getrandbits(32):08x}')",
                 "    async with asyncio.timeout(timeout):",
                 f"        return await request.app.state.pool.fetch(key, limit={limit})",
                 ""]
    return "\n".join(body)


def response(call_id: str, name: str, content: str) -> str:
    return ("<tool_response>\n" + json.dumps({"tool_call_id": call_id, "name": name,
                                              "content": content}) + "\n</tool_response>")


def call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def make_row(rng: random.Random, index: int) -> dict[str, Any]:
    repo = rng.choice(["billing-api", "ingest-worker", "search-gateway", "auth-service"])
    turns = [{"from": "system", "value": SYSTEM},
             {"from": "human", "value": f"The CI for {repo} is red since this morning. Find out "
                                        "why, fix it, and make sure the staging rollout works."}]
    kinds = ["pytest", "pip", "npm", "docker", "kubectl", "rollout", "health", "heartbeat",
             "read", "read_again", "ls"]
    read_path = f"src/{repo.replace('-', '_')}/{rng.choice(MODULES)}"
    read_text = source_file(rng, read_path)
    steps = rng.sample(kinds, rng.randint(5, len(kinds)))
    if "read_again" in steps and "read" not in steps:
        steps.insert(steps.index("read_again"), "read")
    if "read_again" in steps and steps.index("read_again") < steps.index("read"):
        steps.remove("read_again")
        steps.append("read_again")
    steps += rng.sample(["pytest", "kubectl", "rollout", "heartbeat"], rng.randint(0, 3))
    steps += ["read_other"] * rng.randint(0, 6)  # files that distill cannot shrink
    for kind in steps:
        if kind in ("read", "read_again"):
            name, args, out = "read_file", {"path": read_path}, read_text
        elif kind == "read_other":
            path = f"src/{repo.replace('-', '_')}/{rng.choice(MODULES)}"
            name, args, out = "read_file", {"path": path}, source_file(rng, path)
        else:
            name = "terminal"
            command, out = {
                "pytest": ("python -m pytest -x -q tests/", lambda: pytest_run(rng, repo)),
                "pip": ("pip install -r requirements.txt", lambda: pip_install(rng)),
                "npm": ("npm ci --prefix web", lambda: npm_install(rng)),
                "docker": (f"docker build -t {repo}:dev .", lambda: docker_build(rng, repo)),
                "kubectl": (f"kubectl get pods -n staging -l app={repo} -o json",
                            lambda: kubectl_pods(rng, repo)),
                "rollout": (f"kubectl rollout status deploy/{repo} -n staging",
                            lambda: rollout_poll(rng, repo)),
                "health": ("for i in $(seq 1 60); do curl -sf localhost:8080/healthz && break; "
                           "sleep 1; done", lambda: health_poll(rng)),
                "heartbeat": (f"tail -n 80 /var/log/{repo}/worker.log", lambda: heartbeat_log(rng)),
                "ls": (f"ls -la src/{repo.replace('-', '_')}",
                       lambda: "\n".join(f"-rw-r--r-- 1 dev dev {rng.randint(200, 9000):5d} Nov 23 "
                                         f"09:{rng.randint(10, 59)} {Path(m).name}"
                                         for m in MODULES)),
            }[kind]
            args, out = {"command": command}, out()
        turns.append({"from": "gpt", "value": f"<think>\nNext: {kind} to narrow it down.\n"
                                              f"</think>\n{call(name, args)}"})
        turns.append({"from": "tool", "value": response(f"call_{rng.getrandbits(32):08x}", name,
                                                        out)})
    turns.append({"from": "gpt", "value": "The failures came from the request timeout being "
                                          "lowered; I restored it and the rollout finished."})
    return {"id": f"term-{index:04d}", "conversations": turns,
            "metadata": {"source": "make_terminal_samples.py", "repo": repo}, "reward": 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=24)
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--out", type=Path, default=Path("data_samples"))
    args = parser.parse_args()
    rng = random.Random(args.seed)
    rows = [make_row(rng, i) for i in range(args.rows)]
    args.out.mkdir(parents=True, exist_ok=True)
    with (args.out / "terminal_hermes.jsonl").open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    with (args.out / "terminal_openai.jsonl").open("w", encoding="utf-8") as f:
        for i, row in enumerate(rows):
            f.write(json.dumps(openai_messages(row, i), ensure_ascii=False) + "\n")
    with (args.out / "terminal_llamafactory.json").open("w", encoding="utf-8") as f:
        json.dump([llamafactory_sharegpt(r) for r in rows], f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(rows)} terminal-heavy rows in 3 dialects to {args.out}")


if __name__ == "__main__":
    main()
