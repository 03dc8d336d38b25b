"""The command loop of the engine probes (vllm_probe.py, sglang_probe.py), which run in their
framework's own venv: standard library only. One command a line on stdin, one JSON line on
stdout after each."""
import json
import sys
import traceback


def say(**record):
    print(json.dumps(record), flush=True)


def answer_commands(commands):
    """Runs `commands[name]()` for each line of stdin and prints the record it returns; an
    unknown command, or one that raises, prints {"error": ...} and the probe goes on (the test
    judges the answer). "quit" ends the loop after its answer."""
    for line in sys.stdin:
        command = line.strip()
        try:
            if command in commands:
                say(**commands[command]())
            else:
                say(error=f"unknown command {command!r}")
        except Exception as e:
            traceback.print_exc()
            say(error=f"{type(e).__name__}: {e}"[:2000])
        if command == "quit":
            break
