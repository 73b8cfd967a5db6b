"""Lambda footprint: each handler's cold import time against `import boto3`, and package sizes.

    python bench/lambda_footprint.py                 # 15 rounds; sizes from .aws-sam/build
    python bench/lambda_footprint.py --rounds 30 --out-json bench/results/lambda_latest.json

1. Cold import. A Lambda cold start imports the handler module before the first event; Lethe's
   handlers read their settings and create clients on the first event (lethe_shared.config),
   so the import is what every cold start pays before any work. Each round starts a fresh
   Python process per handler and one for the baseline, `import boto3` (what any Python
   function that calls AWS pays), in a rotating order, and times the import inside the process
   (time.perf_counter around the import statement: interpreter start-up is the same for all
   and left out). The handler runs with its environment from events/env.json and tracing on,
   as deployed (Powertools' Tracer imports the X-Ray SDK and patches botocore at import), and
   LAMBDA_TASK_ROOT set as Lambda sets it (outside Lambda the X-Ray SDK creates a client for
   centralised sampling at import, which Lambda never does).
   A handler's import is followed by `import boto3`: the handlers create their boto3 clients
   at the first invocation (lethe_shared.aws.wiring), so every cold start still imports boto3
   before it answers its first event; leaving it out would credit a handler with a cost it
   only moved (`import boto3` is in the stack floor too).
   Each process runs as in Lambda: the runtime's Python minor version (python3.13, found as
   the Makefile finds it, or --python), isolated (-I: no user site, no dev venv), with only the
   runtime's boto3 (requirements/lambda.lock's pin) and the layer's packages
   (layers/shared/requirements.txt; the indexer also layers/arrow/requirements.txt), installed
   by pip into bench/.lambda-site/ once and reused (wheels for this machine's architecture, the
   same releases as the arm64 layers).
   Target: median ratio <= 1.5 for every handler that reads no data file (all but the indexer,
   which reads Parquet with pyarrow from its own layer).
   Two reference rows: the stack floor (boto3, pydantic, Powertools' Logger, Metrics and
   Tracer; `import pydantic` alone loads only pydantic's lazy package) and the model floor,
   the stack floor plus one settings model read the way every handler reads its environment at
   its first event (lethe_shared.config: pydantic.main and the schema builder load and build
   one schema). Every handler pays the model floor by its first event at the latest.
2. Heavy modules: which of pyarrow, pandas, numpy, pyspark each handler has in sys.modules
   after its import: heavy libraries belong only to the functions that need them.
3. Package sizes: each function's code and each layer as `sam build` wrote them
   (.aws-sam/build; `make sam-build` first), unzipped bytes, and which layers each function
   loads (template.yaml). Lambda's limit is 250 MB unzipped for a function and its layers.

Results: Markdown on stdout and JSON (`--out-json`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
BUILD = REPO / ".aws-sam" / "build"
HEAVY = ("pyarrow", "pandas", "numpy", "pyspark")
READS_DATA = frozenset({"IndexObjectFunction"})  # reads Parquet objects: pyarrow expected
TARGET = 1.5
BASELINE = "import boto3"
STACK_FLOOR = "stack floor"
MODEL_FLOOR = "model floor"
FLOOR_STATEMENT = (
    "import boto3, pydantic; from aws_lambda_powertools import Logger, Metrics, Tracer; "
    "Logger(); Metrics(namespace='Lethe'); Tracer(service='lethe')"
)
# The stack floor and what every handler's first event does at the latest: read its settings
# into a pydantic model (lethe_shared.config.load_settings).
MODEL_STATEMENT = (
    FLOOR_STATEMENT
    + "\nfrom pydantic import Field\nfrom lethe_shared.config import Settings, load_settings\n"
    "class FloorSettings(Settings):\n"
    "    table: str = Field(alias='FLOOR_TABLE', min_length=1)\n"
    "load_settings(FloorSettings, {'FLOOR_TABLE': 'table'})"
)
REFERENCES = (STACK_FLOOR, MODEL_FLOOR)
# Imported by every handler's first event at the latest (its clients are created then),
# measured with the handler's import: see 1. above.
FIRST_EVENT_IMPORTS = "import boto3"

PROBE = """
import json, os, sys, time
sys.path[:0] = [p for p in os.environ.get("FOOTPRINT_PATH", "").split(os.pathsep) if p]
started, cpu = time.perf_counter(), time.process_time()
{statement}
elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print(json.dumps({{"seconds": elapsed, "cpu": cpu, "heavy": heavy, "modules": len(sys.modules)}}))
"""


class _Loader(yaml.SafeLoader):
    pass


def _tagged(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node)
    return loader.construct_mapping(node)  # type: ignore[arg-type]


_Loader.add_multi_constructor("!", _tagged)


def functions() -> dict[str, dict[str, Any]]:
    """Logical id -> {code, handler module, layers} of every AWS::Serverless::Function."""
    template = yaml.load((REPO / "template.yaml").read_text(), Loader=_Loader)
    global_layers = template.get("Globals", {}).get("Function", {}).get("Layers", [])
    found = {}
    for logical_id, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        props = resource["Properties"]
        layers = [str(layer) for layer in [*global_layers, *props.get("Layers", [])]]
        found[logical_id] = {
            "code": REPO / props["CodeUri"],
            "module": props.get("Handler", "app.handler").split(".")[0],
            "layers": layers,
        }
    return found


SITE = REPO / "bench" / ".lambda-site"
LOCK = REPO / "requirements" / "lambda.lock"
RUNTIME_PACKAGES = ("boto3", "botocore", "s3transfer", "jmespath", "urllib3", "python-dateutil",
                    "six")  # fmt: skip


def _python(requested: str | None) -> str:
    """The Lambda runtime's interpreter: --python, else python3.13 as the Makefile finds it."""
    if requested:
        return requested
    candidates = ["python3.13", *sorted(str(p) for p in Path.home().glob(
        ".pyenv/versions/3.13.*/bin/python3.13"))]  # fmt: skip
    for candidate in candidates:
        check = subprocess.run(
            [candidate, "-c", "import sys; print(sys.version_info[:2] == (3, 13))"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if check.returncode == 0 and check.stdout.strip() == "True":
            return candidate
    raise SystemExit("python3.13 not found (the Lambda runtime's minor version): pass --python")


def _pins(path: Path, names: tuple[str, ...] | None = None) -> list[str]:
    pins = []
    for text in path.read_text().splitlines():
        pin = text.split("#", 1)[0].strip()
        if "==" in pin and (names is None or pin.split("==")[0].lower() in names):
            pins.append(pin)
    return pins


def site(python: str, name: str, requirements: list[Path]) -> Path:
    """A Lambda-like site-packages: the runtime's boto3 and the given layer requirements."""
    target = SITE / name
    wanted = sorted(_pins(LOCK, RUNTIME_PACKAGES) + [p for r in requirements for p in _pins(r)])
    stamp = target / ".installed"
    if stamp.exists() and stamp.read_text() == "\n".join(wanted):
        return target
    subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
         "--no-warn-conflicts",
         "--no-compile", "--target", str(target), "--upgrade", *wanted],
        check=True,
    )  # fmt: skip
    stamp.write_text("\n".join(wanted))
    return target


def _run(python: str, statement: str, env: dict[str, str], cwd: Path) -> dict[str, Any]:
    probe = PROBE.format(statement=statement, heavy=HEAVY)
    result = subprocess.run(
        [python, "-I", "-c", probe],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{statement!r} failed:\n{result.stderr}")
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def _env(extra: dict[str, str], pythonpath: list[Path]) -> dict[str, str]:
    keep = ("PATH", "HOME", "LANG", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        {
            "FOOTPRINT_PATH": os.pathsep.join(str(p) for p in pythonpath),
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_REGION": "us-east-1",
            "AWS_LAMBDA_FUNCTION_NAME": "footprint",
        }
    )
    env.update(extra)
    return env


def measure_imports(rounds: int, python: str) -> dict[str, Any]:
    specs = functions()
    env_file = json.loads((REPO / "events" / "env.json").read_text())
    shared = site(python, "shared", [REPO / "layers" / "shared" / "requirements.txt"])
    arrow = site(python, "arrow", [REPO / "layers" / "arrow" / "requirements.txt"])
    floor_env = _env({"LAMBDA_TASK_ROOT": str(REPO)}, [shared])
    jobs: dict[str, tuple[str, dict[str, str], Path]] = {
        "baseline": (BASELINE, _env({}, [shared]), REPO),
        # What every handler imports before any Lethe code: the stack this project mandates
        # (boto3, pydantic, Powertools' Logger, Metrics and Tracer with the X-Ray SDK patching).
        STACK_FLOOR: (FLOOR_STATEMENT, floor_env, REPO),
        MODEL_FLOOR: (
            MODEL_STATEMENT,
            _env({"LAMBDA_TASK_ROOT": str(REPO)}, [REPO / "layers" / "shared", shared]),
            REPO,
        ),
    }
    for logical_id, spec in sorted(specs.items()):
        # LAMBDA_TASK_ROOT as Lambda sets it: the X-Ray SDK then takes Lambda's sampling
        # decision instead of creating a client for centralised sampling rules at import
        lambda_env = {**env_file.get(logical_id, {}), "LAMBDA_TASK_ROOT": str(spec["code"])}
        layers = [REPO / "layers" / "shared", shared]
        if "ArrowLayer" in spec["layers"]:
            layers.append(arrow)
        env = _env(lambda_env, [spec["code"], *layers])
        statement = f"import {spec['module']}; {FIRST_EVENT_IMPORTS}"
        jobs[logical_id] = (statement, env, spec["code"])
    # Bytecode: compiled once, as in a deployed package (Lambda keeps the .pyc it writes in
    # /tmp only); the warm-up round below writes nothing (PYTHONDONTWRITEBYTECODE) but loads
    # every file into the page cache.
    for statement, env, cwd in jobs.values():
        _run(python, statement, env, cwd)
    wall: dict[str, list[float]] = {name: [] for name in jobs}
    cpu: dict[str, list[float]] = {name: [] for name in jobs}
    heavy: dict[str, list[str]] = {}
    modules: dict[str, int] = {}
    names = list(jobs)
    for round_number in range(rounds):
        shift = round_number % len(names)
        for name in names[shift:] + names[:shift]:
            statement, env, cwd = jobs[name]
            got = _run(python, statement, env, cwd)
            wall[name].append(got["seconds"])
            cpu[name].append(got["cpu"])
            heavy[name], modules[name] = got["heavy"], got["modules"]

    def ms(values: list[float]) -> dict[str, float]:
        return {
            "median": round(statistics.median(values) * 1000, 1),
            "min": round(min(values) * 1000, 1),
            "max": round(max(values) * 1000, 1),
        }

    base_cpu, base_wall = statistics.median(cpu["baseline"]), statistics.median(wall["baseline"])
    rows = []
    floor_cpu = statistics.median(cpu[STACK_FLOOR])
    for name in names[1:]:
        ratio = statistics.median(cpu[name]) / base_cpu
        per_round = sorted(c / b for c, b in zip(cpu[name], cpu["baseline"], strict=True))
        reads = name in READS_DATA
        rows.append(
            {
                "function": name,
                "cpu_ms": ms(cpu[name]),
                "wall_ms": ms(wall[name]),
                "ratio_cpu": round(ratio, 2),
                "ratio_wall": round(statistics.median(wall[name]) / base_wall, 2),
                "ratio_cpu_range": [round(per_round[0], 2), round(per_round[-1], 2)],
                "over_floor_cpu_ms": round((statistics.median(cpu[name]) - floor_cpu) * 1000, 1),
                "modules": modules[name],
                "heavy": heavy[name],
                "reads_data": reads,
                "meets_target": reads or name in REFERENCES or ratio <= TARGET,
                "heavy_ok": bool(heavy[name]) == reads,
            }
        )
    return {
        "baseline_cpu_ms": ms(cpu["baseline"]),
        "baseline_wall_ms": ms(wall["baseline"]),
        "baseline_modules": modules["baseline"],
        "rounds": rounds,
        "functions": rows,
    }


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def measure_sizes() -> dict[str, Any]:
    if not BUILD.exists():
        return {"error": "no .aws-sam/build: run `make sam-build` first"}
    specs = functions()
    layers = {p.name: _size(p) for p in BUILD.iterdir() if p.is_dir() and p.name.endswith("Layer")}
    rows = []
    for logical_id, spec in sorted(specs.items()):
        code = _size(BUILD / logical_id) if (BUILD / logical_id).exists() else None
        names = [layer for layer in spec["layers"] if layer in layers]
        total = (code or 0) + sum(layers[name] for name in names)
        rows.append({"function": logical_id, "code_bytes": code, "layers": names,
                     "total_bytes": total})  # fmt: skip
    return {"layers": layers, "functions": rows, "limit_bytes": 250 * 1024 * 1024}


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 1024 / 1024:.1f}"


def markdown(result: dict[str, Any]) -> str:
    imports, sizes = result["imports"], result["sizes"]
    base = imports["baseline_cpu_ms"]
    lines = [
        f"Cold import, median of {imports['rounds']} fresh processes each, in rotating order; "
        f"baseline `{BASELINE}`: {base['median']} ms CPU ({base['min']}-{base['max']}), "
        f"{imports['baseline_wall_ms']['median']} ms wall, {imports['baseline_modules']} "
        "modules. Ratios are of the process's CPU time (steadier than wall time on a shared "
        "machine); the wall ratio is given beside it.",
        "",
        "| function | CPU ms | min-max | vs `import boto3` (CPU) | per-round range | wall ratio "
        "| over the stack floor (CPU ms) | modules | heavy modules | target <= 1.5x |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in imports["functions"]:
        if row["function"] in REFERENCES:
            target = "(reference)"
        elif row["reads_data"]:
            target = "n/a (reads Parquet)"
        else:
            target = "met" if row["meets_target"] else "**missed**"
        cpu, low, high = row["cpu_ms"], *row["ratio_cpu_range"]
        lines.append(
            f"| {row['function']} | {cpu['median']} | {cpu['min']}-{cpu['max']} | "
            f"{row['ratio_cpu']:.2f}x | {low:.2f}-{high:.2f}x | {row['ratio_wall']:.2f}x | "
            f"{row['over_floor_cpu_ms']} | {row['modules']} | {', '.join(row['heavy']) or 'none'} "
            f"| {target} |"
        )
    lines += ["", "Package sizes as `sam build` wrote them (unzipped MiB; limit 250 MiB per "
              "function with its layers):", ""]  # fmt: skip
    if "error" in sizes:
        lines.append(sizes["error"])
    else:
        lines += ["| function | code | layers | total |", "|---|---:|---|---:|"]
        for row in sizes["functions"]:
            lines.append(
                f"| {row['function']} | {_mb(row['code_bytes'])} | "
                + ", ".join(f"{n} ({_mb(sizes['layers'][n])})" for n in row["layers"])
                + f" | {_mb(row['total_bytes'])} |"
            )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--python", help="the Lambda runtime's interpreter (default python3.13)")
    parser.add_argument(
        "--out-json", type=Path, default=REPO / "bench" / "results" / "lambda_latest.json"
    )
    args = parser.parse_args()
    python = _python(args.python)
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    result = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "python": version,
            "platform": platform.platform(),
            "cores": os.cpu_count(),
            "load_average_start": os.getloadavg(),
        },
        "imports": measure_imports(args.rounds, python),
        "sizes": measure_sizes(),
    }
    result["machine"]["load_average_end"] = os.getloadavg()
    args.out_json.parent.mkdir(parents=True, exist_ok=True)
    args.out_json.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    misses = [r["function"] for r in result["imports"]["functions"] if not r["meets_target"]]
    heavy = [r["function"] for r in result["imports"]["functions"] if not r["heavy_ok"]]
    if misses or heavy:
        print(f"\ntarget missed: {misses}; heavy modules where not needed: {heavy}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
