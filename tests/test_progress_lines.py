"""Progress in a log: where stdout is not a terminal, long stages print a plain line every
FLOW_PROGRESS_SECONDS with the count, the rate, the time left and the step's loss."""

from __future__ import annotations

from flows.progress_lines import ProgressLines


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_long_sft_prints_a_line_every_interval_and_at_the_end():
    out, clock = [], Clock()
    lines = ProgressLines(out.append, enabled=True, every=30, clock=clock)
    lines("stage", "sft")
    lines("stage", "sft")  # the pipeline's and the stage flow's own: said once
    for step in range(1, 101):  # one step a second, as the trainer reports them
        clock.t = float(step)
        lines("sft", {"step": step, "steps": 100, "loss": 1.0 / step})
    assert out[0] == "sft: started" and out[1].startswith("sft step")
    assert out[1] == "sft step 31/100 (31%): 1.00 steps/s, about 1 min 9 s left; loss 0.032"
    assert [ln.split()[2] for ln in out[1:]] == ["31/100", "61/100", "91/100", "100/100"]
    assert out[-1].startswith("sft step 100/100 (100%): 1.00 steps/s") and "left" not in out[-1]


def test_labelling_counts_episodes_and_training_shows_accuracy():
    out, clock = [], Clock()
    lines = ProgressLines(out.append, enabled=True, every=10, clock=clock)
    for done in (0, 128, 256, 384, 512):  # 64 questions x 8, told as each episode ends
        clock.t += 12
        lines("label", {"done": done, "total": 512})
    assert out[-1] == "label 512/512 (100%): 10.67 episodes/s"
    lines("train", {"step": 1, "steps": 3, "accuracy": 0.25})
    clock.t += 60
    lines("train", {"step": 3, "steps": 3, "accuracy": 0.5})
    assert out[-1] == "train step 3/3 (100%): 0.03 steps/s; accuracy 0.500"
    lines("eval", {"done": 1, "total": 96})
    clock.t += 40
    lines("eval", {"done": 41, "total": 96})
    assert out[-1] == "eval 41/96 (42%): 1.00 episodes/s, about 55 s left"


def test_on_a_terminal_it_stays_quiet():
    out = []
    lines = ProgressLines(out.append, enabled=False, every=0)
    lines("stage", "sft")
    lines("sft", {"step": 5, "steps": 5, "loss": 0.1})
    assert out == []


def test_an_engine_start_through_the_cli_leaves_no_warnings_on_the_console(tiny_model):
    """vLLM's FutureWarnings, torch's NUMA-binding warning and vLLM's weight-loading bar at every
    CPU engine start are kept off the console of a process that runs the CLI's code."""
    import subprocess
    import sys

    from tests.conftest import REPO, require_vllm

    require_vllm()
    code = (
        "import flows.cli\n"
        "from pipeline.rollout.engines import VLLMEngine\n"
        f"VLLMEngine({tiny_model!r}).close()\n"
        "print('engine started')\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "TORCH_CPP_LOG_LEVEL"}
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0 and "engine started" in res.stdout, res.stderr[-2000:]
    assert "FutureWarning" not in res.stderr and "NUMA binding" not in res.stderr, res.stderr
    assert "checkpoint shards" not in res.stderr, res.stderr  # vLLM's loading bar, into a log


def test_a_log_gets_no_tqdm_bars_from_libraries_that_draw_their_own():
    """transformers' GGUF conversion draws a tqdm bar whatever HF_HUB_DISABLE_PROGRESS_BARS says;
    with stderr a file (a log) the CLI's process draws none."""
    import subprocess
    import sys

    from tests.conftest import REPO

    code = (
        "import flows.cli\n"
        "from tqdm.auto import tqdm\n"
        "print(sum(tqdm(range(3), desc='Converting and de-quantizing GGUF tensors...')))\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "TQDM_DISABLE"}
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0 and res.stdout.strip() == "3", res.stderr[-2000:]
    assert "de-quantizing" not in res.stderr, res.stderr
