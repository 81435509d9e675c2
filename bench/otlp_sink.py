"""An OTLP/HTTP trace sink for the benchmark's traced gateway: accepts ``POST /v1/traces``, decodes
each export (as a collector would) and keeps only the count.

    python -m bench.otlp_sink --port 4318
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.otlp_receiver import OtlpReceiver


async def serve(port: int) -> None:
    sink = await OtlpReceiver(keep=False).start(port)
    print(f"otlp sink on {sink.url}", flush=True)
    try:
        while True:
            await asyncio.sleep(3600)
    finally:
        await sink.stop()


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.otlp_sink", description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    asyncio.run(serve(ap.parse_args().port))


if __name__ == "__main__":
    main()
