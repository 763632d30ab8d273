"""Code sources: Dolci-Think-RL code rows (training, in-domain test) and LiveCodeBench (training, v6 benchmark)."""

from __future__ import annotations

import base64
import json
import logging
import pickle
import re
import zlib
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from sdpocl.data.loaders.common import RowError, _field, _record

log = logging.getLogger(__name__)

#: data/format/prompts.py CODE_PROMPT
CODE_PROMPT = (
    "You are a coding expert. You will be given a coding problem, and you need to write a correct "
    "Python program that matches the specification and passes all tests. The time limit is 1 second. "
    "You may start by outlining your thought process. In the end, please provide the complete code "
    "in a code block enclosed with ``` ```.\n\n{problem}"
)

#: appended to stdin/stdout code problems, because the code reward runs the model's code block
#: first and the tests after it (see the module docstring)
STDIN_NOTE = (
    "\n\nYour program reads the input from standard input and writes the answer to standard output. "
    'Put all of it in a function `main()` and call it only under `if __name__ == "__main__":`.'
)


#: per-test helper of functional (LeetCode-style) tests: newline-separated JSON arguments, a JSON
#: result, a tuple compared as a list -- LiveCodeBench's call-based grading. Accepts a
#: ``class Solution`` method or a top-level function (the public code strips ``self``).
_CALL_HELPER = """\
def _sdpocl_call(fn_name, args_text):
    import json
    args = [json.loads(line) for line in args_text.strip().split("\\n") if line.strip()]
    namespace = globals()
    fn = getattr(namespace["Solution"](), fn_name) if "Solution" in namespace else namespace[fn_name]
    result = fn(*args)
    return list(result) if isinstance(result, tuple) else result
"""

#: per-test helper of stdin/stdout tests: runs ``main()`` with redirected streams and compares
#: stripped lines, tokens equal or equal as decimals (LiveCodeBench's stdio grading).
_STDIO_HELPER = """\
def _sdpocl_stdio(stdin_text, expected):
    import io, sys
    from decimal import Decimal, InvalidOperation
    buffer = io.BytesIO()
    new_in = io.TextIOWrapper(io.BytesIO(stdin_text.encode("utf-8")), encoding="utf-8")
    new_out = io.TextIOWrapper(buffer, encoding="utf-8", write_through=True)
    old = sys.stdin, sys.stdout
    sys.stdin, sys.stdout = new_in, new_out
    try:
        globals()["main"]()
    except SystemExit:
        pass
    finally:
        new_out.flush()
        sys.stdin, sys.stdout = old
    got = [line.strip() for line in buffer.getvalue().decode("utf-8").strip().splitlines()]
    want = [line.strip() for line in expected.strip().splitlines()]
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        gt, wt = g.split(), w.split()
        if len(gt) != len(wt):
            return False
        for a, b in zip(gt, wt):
            if a != b:
                try:
                    if Decimal(a) != Decimal(b):
                        return False
                except (InvalidOperation, ValueError):
                    return False
    return True
"""


def functional_test(fn_name: str, args_text: str, expected_json: str) -> str:
    """A self-contained test string for a call-based problem."""
    return (
        _CALL_HELPER + f"assert _sdpocl_call({fn_name!r}, {args_text!r}) == "
        f"__import__('json').loads({expected_json!r})\n"
    )


def stdio_test(stdin_text: str, expected: str) -> str:
    """A self-contained test string for a stdin/stdout problem (needs ``main()``)."""
    return _STDIO_HELPER + f"assert _sdpocl_stdio({stdin_text!r}, {expected!r})\n"


class _NoGlobals(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # a test payload is a plain str: no classes
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}")


def decode_lcb_tests(value: Any) -> list[dict]:
    """LiveCodeBench test cases: a JSON list, or (later releases' private tests) the JSON text
    pickled, zlib-compressed and base64-encoded. Unpickled without any globals."""
    if isinstance(value, list):
        return value
    if not isinstance(value, str) or not value.strip():
        return []
    try:
        return json.loads(value)
    except ValueError:
        pass
    try:
        raw = zlib.decompress(base64.b64decode(value.encode("utf-8")))
        import io

        text = _NoGlobals(io.BytesIO(raw)).load()
        return json.loads(text)
    except (ValueError, zlib.error, pickle.UnpicklingError, EOFError, TypeError) as exc:
        raise RowError(f"undecodable test cases ({type(exc).__name__})") from exc


def _lcb_date(row: Mapping[str, Any]) -> datetime:
    value = row.get("contest_date")
    if isinstance(value, datetime):
        return value.replace(tzinfo=None)
    try:
        return datetime.fromisoformat(str(value)).replace(tzinfo=None)
    except ValueError as exc:
        raise RowError(f"contest_date {value!r}") from exc


def _lcb_window(since: str | None, until: str | None) -> Callable[[Mapping[str, Any]], bool]:
    lo = datetime.fromisoformat(since) if since else None
    hi = datetime.fromisoformat(until) if until else None

    def select(row: Mapping[str, Any]) -> bool:
        try:
            date = _lcb_date(row)
        except RowError as exc:
            log.warning("LiveCodeBench problem %r left out: %s", row.get("question_id"), exc)
            return False
        return (lo is None or date >= lo) and (hi is None or date < hi)

    select.__doc__ = f"LiveCodeBench problems with contest date in [{since}, {until})."
    return select


def _signature(starter: str) -> str:
    """The ``def`` line of LeetCode starter code, without ``self`` (as the public code)."""
    match = re.search(r"def [^\n]*", starter)
    if not match:
        raise RowError("starter code without a def")
    return match.group(0).strip().replace("(self, ", "(").replace("(self)", "()")


def _convert_lcb(dataset: str) -> Callable[[Mapping[str, Any], int], list[dict]]:
    def convert(row: Mapping[str, Any], seed: int) -> list[dict]:
        problem = str(_field(row, "question_content")).strip()
        cases = decode_lcb_tests(row.get("public_test_cases")) + decode_lcb_tests(row.get("private_test_cases"))
        if not cases:
            raise RowError("no test cases")
        starter = str(row.get("starter_code") or "")
        if starter.strip():  # call-based (LeetCode)
            sig = _signature(starter)
            meta = row.get("metadata") or {}
            meta = json.loads(meta) if isinstance(meta, str) and meta.strip() else dict(meta or {})
            fn_name = meta.get("func_name") or re.match(r"def (\w+)", sig).group(1)
            problem += f"\n\nYour solution should have the following signature: ```python\n{sig}\n```"
            tests = [functional_test(fn_name, c["input"], c["output"]) for c in cases]
        else:  # stdin/stdout (AtCoder, Codeforces)
            problem += STDIN_NOTE
            tests = [stdio_test(c["input"], c["output"]) for c in cases]
        return [_record(CODE_PROMPT.format(problem=problem), "", "code", dataset, tests=tests)]

    convert.__doc__ = (
        f"{dataset}: the public code's code prompt; public + private tests become "
        "assert strings (call-based or stdin/stdout via main())."
    )
    return convert


# Schema: LiveCodeBench lcb_runner/benchmarks/code_generation.py (question_title,
# question_content, platform, question_id, contest_id, contest_date, starter_code, difficulty,
# public_test_cases/private_test_cases = JSON [{input, output, testtype}], metadata = JSON
# {func_name}); compressed private tests and the release_v6 file list (test.jsonl .. test6.jsonl)
# as in the public LCB loaders; window and signature line from lasgroup/SDPO
# data/utils/livecodebench.py (LCB_TEST_CUTOFF 2025-02-01, until 2025-05-01).
convert_livecodebench_v6 = _convert_lcb("livecodebench_v6")
convert_livecodebench_train = _convert_lcb("livecodebench_train")


def _as_list(value: Any) -> list:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


def select_dolci_code(row: Mapping[str, Any]) -> bool:
    """Rows verified by a code verifier (``dataset`` ``code`` or ``code_stdio``)."""
    return any(d in ("code", "code_stdio") for d in _as_list(row.get("dataset")))


def _expand_json_lists(items: Iterable[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        if isinstance(item, str) and item.strip()[:1] in "[{":
            try:
                item = json.loads(item)
            except ValueError:
                out.append(item)
                continue
        if isinstance(item, list):
            out.extend(item)
        else:
            out.append(item)
    return out


def convert_dolci_code(row: Mapping[str, Any], seed: int) -> list[dict]:
    """Dolci-Think-RL code rows: ``code`` rows carry assert strings (used as the tests),
    ``code_stdio`` rows stdin/stdout pairs (turned into main()-based tests). ASSUMED schema."""
    # Schema (assumed, see module docstring): allenai/Dolci-Think-RL-7B split train with prompt
    # (str), ground_truth (list[str]), dataset (list[str]) as on the Dolci-Instruct-RL and
    # Dolci-RL-Zero-Code-7B cards; label formats of open-instruct's CodeVerifier ("tests: list of
    # test cases or a JSON string representation of a list").
    prompt = str(_field(row, "prompt"))
    if prompt.startswith("user: "):  # some Dolci prompts carry a role prefix
        prompt = prompt[len("user: ") :]
    truth = _expand_json_lists(_as_list(row.get("ground_truth")))
    if "code_stdio" in _as_list(row.get("dataset")):
        pairs = [t for t in truth if isinstance(t, Mapping) and "input" in t and "output" in t]
        if not pairs or len(pairs) != len(truth):
            raise RowError("code_stdio ground truth is not a list of {input, output}")
        tests = [stdio_test(str(p["input"]), str(p["output"])) for p in pairs]
        prompt = prompt.rstrip() + STDIN_NOTE
    else:
        tests = [t for t in truth if isinstance(t, str) and t.strip()]
        if not tests or len(tests) != len(truth) or not any("assert" in t for t in tests):
            raise RowError("code ground truth is not a list of assert strings")
    return [_record(CODE_PROMPT.format(problem=prompt.strip()), "", "code", "dolci_code", tests=tests)]
