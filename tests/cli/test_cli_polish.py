"""CLI polish: "did you mean" for misspelt commands, choices and options; help metavars
named after the flag (``EPS[,EPS...]``); plain progress lines (no carriage returns or cursor
codes) when the output is not a terminal."""

from __future__ import annotations

import io
import re

import pytest

from ldpsim._src._progress import PlainProgress, progress_bar, wants_bars
from ldpsim._src.cli import build_parser
from ldpsim.cli import main


@pytest.mark.parametrize("argv,hint", [
    (["swep"], "did you mean 'sweep'?"),
    (["account", "ldpp"], "did you mean 'ldp'?"),
    (["sweep", "--preset", "quik"], "did you mean 'quick'?"),
    (["sweep", "--epsilom", "1"], "did you mean --epsilon for --epsilom?"),
    (["run", "--roundz", "3"], "did you mean --rounds for --roundz?"),
    (["account", "ldp", "--sigma", "1", "--clipp", "1"], "did you mean --clip for --clipp?"),
    (["run", "--delat=1e-5"], "did you mean --delta for --delat?"),
])
def test_misspellings_get_did_you_mean(argv, hint, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and hint in err


def test_an_unknown_option_names_its_command_and_no_far_guess(capsys):
    with pytest.raises(SystemExit):
        main(["sweep", "--zzzzzz", "1"])
    err = capsys.readouterr().err
    assert err.startswith("ldpsim sweep: error: unrecognized arguments: --zzzzzz 1 (see 'ldpsim sweep --help')")


def test_help_metavars_name_the_flag_not_the_dest():
    sweep = build_parser()._subparsers._group_actions[0].choices["sweep"].format_help()
    assert "--epsilon EPS[,EPS...]" in sweep and "--clients M[,M...]" in sweep
    assert "--rounds ROUNDS" in sweep and "--client-lr CLIENT_LR" in sweep
    assert not re.search(r"\b(GRID|SET)_[A-Z_]+", sweep)
    noise = build_parser()._subparsers._group_actions[0].choices["noise"].format_help()
    assert "--clients N[,N...]" in noise


def test_plain_progress_lines_in_a_log():
    log = io.StringIO()
    assert not wants_bars(log)
    bar = progress_bar(total=20, desc="rounds (compiling)", unit="round", file=log)
    assert isinstance(bar, PlainProgress)
    bar.set_description("rounds")
    for i in range(20):
        bar.set_postfix({"accuracy": 0.1 + i / 100})
        bar.update(1)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    # The start prints at once; the next lines wait for a new tenth and >= 1 s (none in this
    # fast loop); the end always prints.
    assert len(lines) == 2
    assert lines[0].startswith("rounds (compiling): 0/20 round (0%), 0:00 elapsed")
    assert lines[-1].startswith("rounds: 20/20 round (100%)") and "accuracy=0.29" in lines[-1]
    assert "ETA" not in lines[-1]


def test_progress_env_override(monkeypatch):
    monkeypatch.setenv("LDPSIM_PROGRESS", "bars")
    assert wants_bars(io.StringIO())
    monkeypatch.setenv("LDPSIM_PROGRESS", "plain")

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert not wants_bars(Tty())
    monkeypatch.delenv("LDPSIM_PROGRESS")
    assert wants_bars(Tty())


@pytest.mark.slow
def test_a_command_writes_plain_progress_to_a_redirected_stderr(capsys):
    assert main(["noise", "--model", "logreg", "--epsilon", "1", "--delta", "1e-5",
                 "--clients", "1,10", "--trials", "2"]) == 0
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    assert re.search(r"^trials: 4/4 trial \(100%\)", err, re.M), err


def test_run_help_names_every_mode_that_reads_epsilon():
    from ldpsim._src.privacy import registry

    text = " ".join(build_parser()._subparsers._group_actions[0].choices["run"].format_help().split())
    readers = [m.name for m in registry.MODES if "epsilon" in m.settings]
    assert readers == ["ldp", "discrete"]
    assert "--epsilon is used by ldp and discrete only" in text


def test_run_help_names_every_model():
    from ldpsim._src.models import MODEL_NAMES

    text = " ".join(build_parser()._subparsers._group_actions[0].choices["run"].format_help().split())
    for name in MODEL_NAMES:
        assert f" {name}," in text or f" {name} " in text, name


def test_an_unknown_dataset_gets_did_you_mean():
    """The message of every 'unknown dataset' error (the loader raises it where neither a
    built-in nor a TFDS dataset has the name)."""
    from ldpsim._src.data.registry import _known_message

    assert _known_message("mnsit").startswith("unknown dataset 'mnsit' (did you mean 'mnist'?);")
    assert "(did you mean 'fashion_mnist'?)" in _known_message("Fashion-MNST")
    assert "did you mean" not in _known_message("cifar10")


def test_run_delta_takes_the_population_rule(tmp_path, capsys):
    """``ldpsim run --delta 1/population`` as ``sweep --delta`` and run files take it."""
    import csv

    out = tmp_path / "r.csv"
    assert main(["run", "--dataset", "synthetic", "--population", "40", "--clients-per-round",
                 "4", "--rounds", "1", "--epsilon", "2", "--delta", "1/population",
                 "--no-progress", "--out", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert float(rows[-1]["delta"]) == pytest.approx(1 / 40)


def test_run_summary_of_a_run_without_privacy_says_so(tmp_path, capsys):
    """No 'sigma 0 ... sensitivity nan; epsilon_spent nan' for epsilon = inf."""
    assert main(["run", "--dataset", "synthetic", "--population", "40", "--clients-per-round",
                 "4", "--rounds", "1", "--epsilon", "inf", "--no-progress",
                 "--out", str(tmp_path / "r.csv")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("privacy:")]
    assert lines == ["privacy: none (epsilon inf: updates clipped to 1, no noise, nothing "
                     "accounted)"]
