"""Checks optim/lion.py and schedule.py against lion_ref.py / schedule_ref.py."""
import unittest

import numpy as np

import lion_ref
import schedule
import schedule_ref
from optim import lion


def make_problem(seed):
    rng = np.random.default_rng(seed)
    params = {"w": rng.normal(size=(4, 3)), "b": rng.normal(size=3)}
    inputs = rng.normal(size=(16, 4))
    targets = rng.normal(size=(16, 3))
    return params, inputs, targets


def least_squares_grads(params, inputs, targets):
    residual = inputs @ params["w"] + params["b"] - targets
    return {"w": inputs.T @ residual / len(inputs), "b": residual.mean(axis=0)}


def train(module, sched, seed, steps=40, weight_decay=0.3, betas=(0.9, 0.99)):
    params, inputs, targets = make_problem(seed)
    noise_rng = np.random.default_rng(seed + 1)
    opt = module.Lion(params, lr=0.05, betas=betas, weight_decay=weight_decay)
    history = []
    for step in range(steps):
        grads = least_squares_grads(params, inputs, targets)
        grads["w"] = grads["w"] + 0.05 * noise_rng.normal(size=grads["w"].shape)
        if step % 7 == 3:
            grads["b"] = np.zeros_like(grads["b"])  # exercises sign(0) = 0
        lr = sched.warmup_cosine_lr(step, 0.05, 5, steps, 0.1)
        opt.step(grads, lr=lr)
        history.append({k: v.copy() for k, v in params.items()})
    return opt, params, history


class TestLion(unittest.TestCase):
    def assertClose(self, actual, expected, rtol=1e-12, atol=1e-12):
        self.assertIsNotNone(actual)
        np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=rtol, atol=atol)

    def test_trajectory_matches_reference(self):
        for seed, wd, betas in [(0, 0.3, (0.9, 0.99)), (11, 0.0, (0.95, 0.98)), (23, 1.0, (0.5, 0.9))]:
            opt, params, history = train(lion, schedule, seed, weight_decay=wd, betas=betas)
            ref_opt, ref_params, ref_history = train(lion_ref, schedule_ref, seed, weight_decay=wd, betas=betas)
            for got, want in zip(history, ref_history):
                for key in want:
                    self.assertClose(got[key], want[key])
            for key in ref_params:
                self.assertClose(opt.state[key]["exp_avg"], ref_opt.state[key]["exp_avg"])
            self.assertEqual(opt.step_count, ref_opt.step_count)

    def test_first_step_is_signed_gradient(self):
        params = {"x": np.array([1.0, -2.0, 0.5, 3.0])}
        opt = lion.Lion(params, lr=0.1, weight_decay=0.0)
        opt.step({"x": np.array([0.3, -0.2, 0.0, -5.0])})
        self.assertClose(params["x"], [0.9, -1.9, 0.5, 3.1])
        self.assertClose(opt.state["x"]["exp_avg"], [0.003, -0.002, 0.0, -0.05])

    def test_default_lr_and_in_place_update(self):
        rng = np.random.default_rng(5)
        params = {"p": rng.normal(size=6)}
        ref_params = {"p": params["p"].copy()}
        original = params["p"]
        opt = lion.Lion(params, lr=0.01, weight_decay=0.2)
        ref_opt = lion_ref.Lion(ref_params, lr=0.01, weight_decay=0.2)
        for _ in range(3):
            g = rng.normal(size=6)
            opt.step({"p": g})
            ref_opt.step({"p": g.copy()})
        self.assertIs(params["p"], original)
        self.assertClose(params["p"], ref_params["p"])

    def test_invalid_arguments(self):
        with self.assertRaises(ValueError):
            lion.Lion({"p": np.zeros(2)}, lr=0.0)
        with self.assertRaises(ValueError):
            lion.Lion({"p": np.zeros(2)}, betas=(1.0, 0.9))

    def test_hparam_transfer(self):
        for args in [(3e-4, 0.1, 10.0), (1e-3, 0.01, 3.0), (2e-3, 0.05, 5.0)]:
            self.assertClose(lion.lion_hparams_from_adamw(*args), lion_ref.lion_hparams_from_adamw(*args))
        self.assertClose(lion.lion_hparams_from_adamw(1e-3, 0.1), lion_ref.lion_hparams_from_adamw(1e-3, 0.1))


class TestSchedule(unittest.TestCase):
    def test_schedule_matches_reference(self):
        for warmup, total, ratio in [(10, 100, 0.0), (3, 20, 0.1), (0, 50, 0.5), (5, 5, 0.0)]:
            for step in range(total + 10):
                got = schedule.warmup_cosine_lr(step, 0.3, warmup, total, ratio)
                want = schedule_ref.warmup_cosine_lr(step, 0.3, warmup, total, ratio)
                self.assertIsNotNone(got)
                self.assertAlmostEqual(got, want, places=14, msg=f"step {step}")


if __name__ == "__main__":
    unittest.main()
