"""regrtest_results.py LOG JUNIT: one line per module of a Python regrtest run,
"MODULE VERDICT DETAIL", read from the run's progress lines (LOG) and its
--junit-xml file (JUNIT).  VERDICT is pass, skip or fail; DETAIL is the skip
reason, or for a failure the ids of the failed tests, or how the module
ended (for a time-out, with the test that was running)."""
import re
import sys
import xml.etree.ElementTree as ET

log, junit = sys.argv[1], sys.argv[2]
verdicts, hung = {}, {}
progress = re.compile(r"\[\s*\d+/\d+(?:/\d+)?\] (test_\w+) (.*)$")
frame = re.compile(r'File ".*/(test_\w+)\.py", line \d+ in (test_\w+)')
after_timeout = False
for line in open(log, errors="replace"):
    m = progress.search(line.rstrip())
    if m:
        verdicts[m.group(1)] = m.group(2)
    if line.startswith("Timeout ("):
        after_timeout = True
    f = frame.search(line) if after_timeout else None
    if f and f.group(1) not in hung:       # the innermost test frame of the dump
        hung[f.group(1)] = f.group(2)
        after_timeout = False

failed = {}
try:
    for case in ET.parse(junit).iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            name = case.get("name", "")
            module = next((p for p in name.split(".") if p.startswith("test_")), "?")
            failed.setdefault(module, []).append(name.split(".", 2)[-1])
except (OSError, ET.ParseError):
    pass

for module, text in verdicts.items():
    if text.startswith("passed") or text == "failed (env changed)":
        print(module, "pass", text)
    elif text.startswith("skipped") or "resource denied" in text:
        print(module, "skip", text)
    elif module in hung:
        print(module, "fail", "timed out in", hung[module], "(" + text + ")")
    else:
        print(module, "fail", " ".join(sorted(failed.get(module, []))) or text)
