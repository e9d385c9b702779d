"""Training of joint embeddings (journal paper, section 4.3.1).

Protocol: each epoch shows every training image once with one of its captions drawn at
random (or, with ``captions: all``, every caption once); batches of 128 where every other
pair is a negative; Adam; gradient-norm clipping at 2; evaluation on dev after each epoch;
the best dev-rsum checkpoint is kept. The PH / POE curriculum trains with L_S until dev
rsum stops improving, then continues the same run with L_M (optionally at another lr).

A run that has not started learning (dev rsum below ``collapse_rsum`` after
``collapse_epochs``, the criterion of the paper's section 6) is reported as collapsed, and
by default restarted once with a sum-loss warm-up.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from tqdm import tqdm

from vsekit.fsio import atomic_write
from vsekit.lab.data import Vocabulary
from vsekit.lab.features.backbones import create_backbone
from vsekit.lab.features.store import StoreError
from vsekit.lab.losses import create_loss, loss_options
from vsekit.lab.models.factory import create_model
from vsekit.lab.train import checkpoint as ckpt
from vsekit.lab.train.bf16 import gemm_context, gemm_kernels
from vsekit.lab.train.config import ExperimentConfig
from vsekit.lab.train.distributed import from_env
from vsekit.lab.train.retrieval_data import TrainData, load_train_data
from vsekit.lab.train.tuned import load_tuned_data, tuned_model
from vsekit.runtime.precision import cpu_info


def train_device(name: str | None) -> torch.device:
    """The device a run trains on: ``name`` (``train.device``), else this rank's GPU
    (``LOCAL_RANK``), else the CPU."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    return torch.device(name or (f"cuda:{local}" if torch.cuda.is_available() else "cpu"))


class _TrainingOutputs(torch.nn.Module):
    """``model.training_outputs`` as a module's forward, for DistributedDataParallel."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, features, texts):
        return self.model.training_outputs(features, texts)


HINGE_LOSSES = ("sum_hinge", "max_hinge")


def param_groups(model: torch.nn.Module) -> list[dict]:
    """Trainable parameters grouped by learning-rate scale: a module with an ``lr_scale``
    attribute (e.g. a pretrained transformer's tuned layers) trains at ``train.lr`` times
    it, everything else at ``train.lr``; the scale is kept in the group as ``lr_scale``."""
    scale_of: dict[int, float] = {}
    for m in model.modules():
        if hasattr(m, "lr_scale"):
            for p in m.parameters():
                scale_of[id(p)] = float(m.lr_scale)
    groups: dict[float, list] = {}
    for p in model.parameters():
        if p.requires_grad:
            groups.setdefault(scale_of.get(id(p), 1.0), []).append(p)
    return [{"params": ps, "lr_scale": s} for s, ps in groups.items()]


def make_optimizer(model: torch.nn.Module, t) -> torch.optim.Optimizer:
    """``train.optimizer``: adam (AdamW), rmsprop (Word2VisualVec: rho 0.9, eps 1e-6),
    sgd, or closed_form (ridge regression, solved once; the optimizer is then unused).

    Each updates all its tensors per operation (``foreach``; PyTorch's default on GPUs
    only): on a CPU the same arithmetic element by element, bit for bit (tested), in
    fewer calls (one tensor at a time was a large share of an FNE epoch on a CPU)."""
    params = param_groups(model)
    kw = {"lr": t.lr, "weight_decay": t.weight_decay, "foreach": True}
    eps = {} if t.eps is None else {"eps": t.eps}
    if t.optimizer in ("adam", "closed_form"):
        return torch.optim.AdamW(params, **kw, **eps)
    if t.optimizer == "rmsprop":
        return torch.optim.RMSprop(params, alpha=t.rmsprop_rho, **kw, **eps)
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, momentum=0.9, **kw)
    raise ValueError(
        f"train.optimizer: unknown {t.optimizer!r}; use adam | rmsprop | sgd | closed_form"
    )


class Trainer:
    """Runs one experiment in ``run_dir``; ``fit()`` trains, resuming if asked."""

    def __init__(
        self, cfg: ExperimentConfig, data: TrainData, run_dir: str | Path, progress: bool = True
    ) -> None:
        self.cfg, self.data, self.run = cfg, data, Path(run_dir)
        self.progress = progress
        t = cfg.train
        if t.threads:
            torch.set_num_threads(t.threads)
        self.device = train_device(t.device)
        #: bf16 GEMMs in fp32 kernels where this CPU would emulate bf16 (``lab.train.bf16``)
        self.gemm_kernels = gemm_kernels(t.precision, self.device, cpu_info())
        self._hinge = cfg.loss.name in HINGE_LOSSES
        self.dist = from_env(self.device)  # several processes under torchrun
        if self.dist.world > 1 and not getattr(data, "distributed", False):
            raise ValueError(f"{cfg.name}: this task trains on one process only")
        if self.dist.world > 1 and t.optimizer == "closed_form":
            raise ValueError(f"{cfg.name}: the closed form trains on one process only")
        if not self.dist.main:
            self.progress = False  # one rank reports
        self._forward = None  # the DDP wrapper's forward, on several processes

    # ------------------------------------------------------------ setup
    def _new_model(self, seed: int) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(seed)
        model = self.data.new_model(self.cfg.model)
        model.to(self.device)
        if self.dist.world > 1:  # rank 0's weights everywhere; gradients averaged by DDP
            ids = [self.device.index] if self.device.type == "cuda" else None
            self._forward = DistributedDataParallel(_TrainingOutputs(model), device_ids=ids)
        return model, make_optimizer(model, self.cfg.train)

    def _loss(self, phase: str) -> torch.nn.Module:
        m = self.cfg.model
        name = {"sum": "sum_hinge", "max": "max_hinge"}.get(phase, self.cfg.loss.name)
        options = self.cfg.loss.options()
        takes = loss_options(name)
        # the similarity a hinge loss compares with is the model's own
        model_side = {"similarity": getattr(m, "similarity", None), "abs": getattr(m, "abs", None)}
        options.update({k: v for k, v in model_side.items() if k in takes and v is not None})
        return create_loss(name, **options)

    def _initial_phase(self, curriculum: str) -> str:
        if curriculum == "sum_then_max":
            return "sum"
        return {"sum_hinge": "sum", "max_hinge": "max"}.get(self.cfg.loss.name, "loss")

    def _agree(self, value: float) -> float:
        """Rank 0's ``value`` on every rank (its clock decides the time budget, so that
        no rank stops an epoch before the others)."""
        if self.dist.world == 1:
            return value
        t = torch.tensor([value], dtype=torch.float64)
        torch.distributed.broadcast(t, 0)
        return float(t)

    def _barrier(self) -> None:
        """Every rank waits here (after rank 0 wrote what the others read next)."""
        if self.dist.world > 1:
            torch.distributed.barrier()

    def _save(self, *args, **kw) -> None:
        """A checkpoint, written by rank 0 (all ranks hold the same weights)."""
        if self.dist.main:
            ckpt.save_epoch(*args, **kw)
        self._barrier()

    def _write_static(self) -> None:
        if not self.dist.main:
            return
        self.run.mkdir(parents=True, exist_ok=True)
        (self.run / "epochs").mkdir(exist_ok=True)
        cfg = self.cfg.to_dict()
        meta = {
            "config": cfg,
            "img_dim": self.data.img_dim,
            "store_fingerprint": self.data.store_fingerprint,
            "image": self.data.image_identity,
        }
        atomic_write(self.run / "config.json", json.dumps(meta, indent=2))
        self.data.vocab.save(self.run / "vocab.json")  # words (or, for tag models, tags)

    # ------------------------------------------------------------ loop
    def refit_plan(self) -> dict | None:
        """``train.refit_from``'s schedule: ``{"epochs", "switch", "sum_best", "best"}``
        (``switch`` None when the reference never switched), read from its checkpoints."""
        ref = self.cfg.train.refit_from
        if not ref:
            return None
        ref = Path(ref).expanduser()
        try:
            meta = json.loads((ref / "config.json").read_text())
            best = json.loads((ref / "best.json").read_text())["epoch"]
            state = json.loads((ckpt.load_pointer(ref, "last") / "state.json").read_text())
        except (OSError, ValueError, KeyError) as e:
            raise ValueError(f"train.refit_from: {ref} is not a finished training run ({e})") from e
        if not meta["config"]["data"]["val_from_train"]:
            raise ValueError(
                f"train.refit_from: {ref} selected its epochs on dev (no data.val_from_train)"
            )
        odd = [e["event"] for e in state["events"] if not e["event"].startswith("switch")]
        if odd:  # a restart or a time cap: its schedule is not the recipe's
            raise ValueError(f"train.refit_from: {ref} has events {odd}; refit a clean run")
        switch = next((e for e in state["events"] if e["event"].startswith("switch")), None)
        return {
            "epochs": best + 1,
            "switch": switch["epoch"] if switch else None,
            "sum_best": switch["from_best_epoch"] if switch else None,
            "best": best,
            "from": str(ref),
        }

    def fit(self, resume: bool = False) -> dict:
        """Train; returns ``{"best_epoch", "best_metrics", "collapsed", "epochs_run", ...}``.

        With ``train.refit_from`` the schedule is that run's (``refit_plan``): a fixed
        number of epochs, the curriculum switch at its epoch, nothing evaluated."""
        t = self.cfg.train
        plan = self.refit_plan()
        epochs = plan["epochs"] if plan else t.epochs
        if resume and (self.run / "last.json").is_file():
            model, opt = self._new_model(t.seed)
            state, rng = ckpt.load_training_state(ckpt.load_pointer(self.run, "last"), model, opt)
            # every rank has read the last epoch before rank 0 may rewrite its folder (at
            # once, when no epoch is left to run)
            self._barrier()
            if self.dist.main:
                self._truncate_log(state["epoch"])
        else:
            if (self.run / "last.json").is_file():
                raise FileExistsError(
                    f"{self.run}: already holds a run; pass --resume to continue it, "
                    "or choose another --run-dir"
                )
            self._write_static()
            self._barrier()
            model, opt = self._new_model(t.seed)
            rng = np.random.default_rng(t.seed)
            state = {
                "epoch": -1,
                "phase": self._initial_phase(t.curriculum),
                "curriculum": t.curriculum,
                "best_score": -float("inf"),
                "best_epoch": -1,
                "bad_epochs": 0,
                "restarts": 0,
                "collapsed": False,
                "seconds": 0.0,
                "events": [{"event": "refit", **plan}] if plan else [],
            }
        t0 = time.perf_counter() - state["seconds"]
        while state["epoch"] + 1 < epochs:
            epoch = state["epoch"] + 1
            self._set_lr(opt, state, epoch)
            loss_fn = self._loss(state["phase"])
            batches = self.data.epoch_batches(t.captions, t.batch_size, rng)
            if t.optimizer == "closed_form":
                mean_loss = self.data.closed_form(model, batches, t.ridge)
            else:
                mean_loss = self._train_epoch(model, opt, loss_fn, batches, epoch)
            metrics = {} if plan else self.data.evaluate(model, t.eval_batch)
            state["seconds"] = self._agree(time.perf_counter() - t0)
            if plan:  # the reference's choices: its best L_S epoch, then its best epoch
                score = float(epoch)
                improved = epoch in (plan["sum_best"], plan["best"])
            else:
                score = metrics[self.data.select]
                improved = score > state["best_score"]
            if improved:
                state.update(best_score=score, best_epoch=epoch, bad_epochs=0)
            else:
                state["bad_epochs"] += 1
            state.update(epoch=epoch, metrics=metrics)
            self._log(
                {
                    "epoch": epoch,
                    "phase": state["phase"],
                    "loss": mean_loss,
                    "lr": opt.param_groups[0]["lr"],
                    "seconds": round(state["seconds"], 1),
                    # where its bf16 GEMMs ran (a resumed run may change machine)
                    "gemm_kernels": self.gemm_kernels,
                    **metrics,
                }
            )
            # curriculum: L_S until dev rsum stops improving, then L_M
            sum_done = state["bad_epochs"] >= t.curriculum_patience or (
                t.curriculum_sum_epochs is not None and epoch + 1 >= t.curriculum_sum_epochs
            )
            switch = state["curriculum"] == "sum_then_max" and state["phase"] == "sum" and sum_done
            if plan:
                switch = epoch == plan["switch"]
            collapsed = (
                not plan
                and self.data.collapse_metric is not None
                and epoch + 1 == t.collapse_epochs
                and state["best_score"] < t.collapse_rsum
            )
            # patience ends L_S only through the switch: a curriculum's L_S phase is not
            # stopped (a plain sum-hinge run, whose phase is "sum" too, is)
            curriculum_ls = state["curriculum"] == "sum_then_max" and state["phase"] == "sum"
            started = t.patience_from is None or state["best_score"] >= t.patience_from
            plateau = (
                not plan
                and t.patience
                and state["bad_epochs"] >= t.patience
                and not curriculum_ls
                and started
            )
            if plateau and state.get("decays", 0) < t.plateau_decays:
                # reduce on plateau, saved with the epoch so that a resume repeats nothing
                state.update(decays=state.get("decays", 0) + 1, bad_epochs=0)
                state["events"].append({"epoch": epoch, "event": "lr decay on plateau",
                                        "decays": state["decays"]})  # fmt: skip
            self._save(self.run, epoch, model, opt, rng, state, best=improved)
            if collapsed:
                state["events"].append(
                    {"epoch": epoch, "event": "collapsed", "best_rsum": state["best_score"]}
                )
                if t.collapse_restart and state["restarts"] == 0 and self._hinge:
                    model, opt, rng = self._restart(state)
                    continue
                state["collapsed"] = True
                self._save(self.run, epoch, model, opt, rng, state, best=False)
                break
            if switch:  # journal 3.5: L_M re-trains the best L_S model, fresh optimiser
                model, opt = self._switch_to_max(model, state, epoch)
                self._save(self.run, epoch, model, opt, rng, state, best=False)
            if t.optimizer == "closed_form":
                break  # solved exactly: another epoch would give the same weights
            if plan:
                continue  # the reference's epoch count: no early stop, no time cap
            if plateau and state["bad_epochs"] >= t.patience:  # no decay left: stop
                state["events"].append({"epoch": epoch, "event": "early stop"})
                break
            if t.max_minutes and state["seconds"] > 60 * t.max_minutes:
                state["events"].append({"epoch": epoch, "event": "time budget reached"})
                break
        self._save(self.run, state["epoch"], model, opt, rng, state, best=False)
        if self.dist.main:
            self._plot()
        best = (
            json.loads((self.run / "best.json").read_text())
            if (self.run / "best.json").is_file()
            else {}
        )
        return {
            "best_epoch": best.get("epoch"),
            "best_metrics": best.get("metrics", {}),
            "collapsed": state["collapsed"],
            "epochs_run": state["epoch"] + 1,
            "seconds": round(state["seconds"], 1),
            "events": state["events"],
        }

    def _switch_to_max(self, model, state: dict, epoch: int):
        """The PH/POE switch as the journal paper defines it (section 3.5): reload the best
        L_S checkpoint and start a fresh optimiser (``train.lr_max_phase`` may set its
        lr); recorded in the run's events."""
        ckpt.load_model_weights(model, ckpt.load_pointer(self.run, "best"))
        # every rank has read the best epoch before rank 0 rewrites this epoch's folder
        # (which may be that one): a rank still reading would find it gone
        self._barrier()
        opt = make_optimizer(model, self.cfg.train)
        state.update(phase="max", bad_epochs=0, decays=0)
        state["events"].append(
            {"epoch": epoch, "event": "switch to max_hinge", "from_best_epoch":
             state["best_epoch"], "optimizer": "fresh"}
        )  # fmt: skip
        return model, opt

    def _restart(self, state: dict):
        """After a collapse: fresh weights (new seed) and a sum-loss warm-up curriculum."""
        state["restarts"] += 1
        model, opt = self._new_model(self.cfg.train.seed + state["restarts"])
        rng = np.random.default_rng(self.cfg.train.seed + state["restarts"])
        state.update(
            curriculum="sum_then_max",
            phase="sum",
            bad_epochs=0,
            best_score=-float("inf"),
            best_epoch=-1,
            epoch=-1,
        )
        state["events"].append({"event": "restart with sum-loss warm-up"})
        return model, opt, rng

    def _set_lr(self, opt: torch.optim.Optimizer, state: dict, epoch: int) -> None:
        t = self.cfg.train
        lr = t.lr_max_phase if (state["phase"] == "max" and t.lr_max_phase) else t.lr
        if t.lr_decay_epochs:
            lr *= t.lr_decay ** (epoch // t.lr_decay_epochs)
        lr *= t.lr_decay ** state.get("decays", 0)  # reduce on plateau (train.plateau_decays)
        for g in opt.param_groups:
            g["lr"] = lr * g.get("lr_scale", 1.0)

    def _train_epoch(self, model, opt, loss_fn, batches: list, epoch: int) -> float:
        model.train()
        t, total, n = self.cfg.train, 0.0, 0
        bar = tqdm(
            batches,
            desc=f"epoch {epoch}",
            unit="batch",
            disable=not self.progress,
            dynamic_ncols=True,
            leave=False,
        )
        for b in bar:
            if len(b) < max(2, self.dist.world):
                continue  # a lone pair has no negatives; every rank needs a row
            with gemm_context(self.gemm_kernels):
                with torch.autocast(
                    self.device.type, dtype=torch.bfloat16, enabled=t.precision == "bf16"
                ):
                    if self.dist.world > 1:
                        loss = self.data.batch_loss(model, loss_fn, b, self.dist, self._forward)
                    else:
                        loss = self.data.batch_loss(model, loss_fn, b)
                opt.zero_grad(set_to_none=True)
                loss.backward()
            if t.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
            opt.step()
            value = float(loss.detach()) / self.dist.world  # the global batch's loss
            total += value * len(b)
            n += len(b)
            bar.set_postfix(loss=f"{value:.3f}")
        return total / max(n, 1)

    # ------------------------------------------------------------ logs
    def _log(self, row: dict) -> None:
        if not self.dist.main:
            return
        with open(self.run / "metrics.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if self.progress:
            print(
                f"epoch {row['epoch']:>3} [{row['phase']}] loss {row['loss']:.4f}  "
                f"{self.data.summary(row) if self.data.select in row else 'refit'}  "
                f"{row['seconds']:.0f}s",
                flush=True,
            )

    def _truncate_log(self, last_epoch: int) -> None:
        f = self.run / "metrics.jsonl"
        if f.is_file():
            rows = [r for r in f.read_text().splitlines() if json.loads(r)["epoch"] <= last_epoch]
            atomic_write(f, "".join(r + "\n" for r in rows))

    def _plot(self) -> None:
        f = self.run / "metrics.jsonl"
        if not f.is_file():
            return
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        rows = [json.loads(r) for r in f.read_text().splitlines()]
        ep = [r["epoch"] for r in rows]
        fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
        key = self.data.select
        ax[0].plot(ep, [r.get(key, float("nan")) for r in rows], marker="o")  # refit: none
        ax[0].set(xlabel="epoch", ylabel=f"dev {key}", title=self.cfg.name)
        ax[1].plot(ep, [r["loss"] for r in rows], marker="o", color="C1")
        ax[1].set(xlabel="epoch", ylabel="train loss")
        fig.tight_layout()
        atomic_write(self.run / "curves.png", lambda tmp: fig.savefig(tmp, dpi=100, format="png"))
        plt.close(fig)


def train(
    cfg: ExperimentConfig, run_dir: str | Path, resume: bool = False, progress: bool = True
) -> dict:
    """Load data (extracting features if the store is missing) and train."""
    from vsekit.lab.train.config import validate

    validate(cfg)  # before any extraction: a typo costs nothing
    run = Path(run_dir)
    d = from_env(train_device(cfg.train.device))
    if not d.main:  # rank 0 extracts and fits what is missing; the others then read it
        torch.distributed.barrier()
    if cfg.task == "tags":
        from vsekit.lab.train.tags import load_tag_data

        data = load_tag_data(cfg, progress)
    else:
        has_vocab = resume and (run / "vocab.json").is_file()
        vocab = Vocabulary.load(run / "vocab.json") if has_vocab else None
        load = load_tuned_data if cfg.tune is not None else load_train_data
        data = load(cfg, vocab, progress and d.main)
    if d.main and d.world > 1:
        torch.distributed.barrier()
    if resume and (run / "config.json").is_file():
        saved = json.loads((run / "config.json").read_text())
        if saved.get("store_fingerprint") != data.store_fingerprint:
            raise StoreError(f"{run}: was trained on other features than {cfg.data.store}")
    return Trainer(cfg, data, run, progress).fit(resume=resume)


def load_run(run_dir: str | Path, which: str = "best") -> tuple[torch.nn.Module, dict]:
    """A trained model (best or last checkpoint) and its saved config JSON."""
    from vsekit.lab.train.config import config_from_json

    run = Path(run_dir)
    meta = json.loads((run / "config.json").read_text())
    cfg = config_from_json(json.dumps(meta["config"]))
    vocab = Vocabulary.load(run / "vocab.json")
    if cfg.tune is not None:  # the stage's weights come from the checkpoint
        random_backbone = create_backbone(cfg.data.backbone, "random")
        model = tuned_model(meta["img_dim"], vocab, cfg.model, cfg.tune, random_backbone)
    else:
        model = create_model(meta["img_dim"], vocab, cfg.model)
    ckpt.load_model_weights(model, ckpt.load_pointer(run, which))
    return model.eval(), meta
