import json

from benchmark_core.cli import main
from benchmark_core.predictions import parse_predictions
from benchmark_core.problemset import load_problemset

from .test_masking_completions import write_pset


def test_every_bad_line_is_listed_with_its_number(tmp_path):
    pset = load_problemset(write_pset(tmp_path / "pset"))
    lines = [
        json.dumps({"paper": "p2", "snippet": "t", "completion": "    return 3"}),
        "{not json",
        b"\xff\xfe bad bytes".decode("latin-1"),
        json.dumps({"paper": "p2", "completion": "x"}),
        json.dumps({"paper": "nope", "snippet": "t", "completion": ""}),
        json.dumps({"paper": "p2", "snippet": "zzz", "completion": ""}),
        json.dumps({"paper": "p2", "snippet": "t", "completion": "dup"}),
        json.dumps({"paper": "p1", "snippet": "s", "completion": ""}),
        json.dumps({"paper": "p1", "snippet": "s", "file": "b.py", "completion": "", "sample": -1}),
        "[1, 2]",
    ]
    data = "\n".join(lines).encode("latin-1")
    preds, problems = parse_predictions(data, pset)
    assert [p.line for p in problems] == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    text = [p.message for p in problems]
    assert "malformed JSON" in text[0]
    assert "not UTF-8" in text[1]
    assert "missing field(s): snippet" in text[2]
    assert "unknown paper 'nope'" in text[3]
    assert "unknown snippet" in text[4]
    assert "duplicate prediction" in text[5] and "first on line 1" in text[5]
    assert "several files" in text[6]
    assert "an integer from 0 to 9999" in text[7]
    assert [p.snippet for p in preds] == ["t"]


def test_empty_completion_is_valid(tmp_path):
    pset = load_problemset(write_pset(tmp_path / "pset"))
    preds, problems = parse_predictions(b'{"paper": "p2", "snippet": "t", "completion": ""}\n', pset)
    assert problems == [] and preds[0].completion == ""


def test_cli_scores_nothing_from_an_invalid_file_unless_asked(tmp_path, capsys):
    pset_dir = write_pset(tmp_path / "pset")
    preds = tmp_path / "p.jsonl"
    preds.write_text('{"paper": "p2", "snippet": "t", "completion": "    return 3"}\n{oops\n')
    out = tmp_path / "r.json"
    assert main(["score", str(pset_dir), str(preds), "-o", str(out), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{preds}:2: malformed JSON" in err and "nothing was scored" in err
    assert not out.exists()
    assert main(["score", str(pset_dir), str(preds), "-o", str(out), "--quiet", "--skip-invalid"]) == 0
    results = json.loads(out.read_text())
    by_name = {(s["paper"], s["snippet"]): s for s in results["snippets"]}
    assert by_name[("p2", "t")]["passed"] is True
    # snippets without a prediction are reported as missing and count as failed
    assert by_name[("p1", "s")]["category"] == "missing" and not by_name[("p1", "s")]["passed"]
