"""Multi-node training on a SLURM cluster: one launcher per node (cluster/train.sbatch runs it with srun)
turns SLURM's variables into the torchrun command that starts that node's processes:

    torchrun --nnodes N --nproc-per-node G --rdzv-backend c10d --rdzv-endpoint HOST:PORT --rdzv-id JOB \
        train.py ARGS [--grad-accum A] [--resume]

N from SLURM_JOB_NUM_NODES (or SLURM_NNODES), G from --gpus-per-node or SLURM_GPUS_ON_NODE /
SLURM_GPUS_PER_NODE ("4" or "h100:4"), HOST the first node of SLURM_JOB_NODELIST (its compressed form, e.g.
"gpu[01-03,07]", read here), JOB from SLURM_JOB_ID. torchrun's c10d rendezvous then starts N x G
processes and train.py's DDP (or --fsdp) runs as under `torchrun --standalone`. --global-batch B sets
--grad-accum to B / (N x G x --batch-size), so a batch holds on any number of nodes; without it, a --data
with a recipe in paper/reproduce.mk (RECIPES: owt and lm1b 512, cnndm 128, gsm8k 1) keeps that recipe's
global batch the same way, or is refused in one line naming it (never trained at another batch unasked);
--global-batch 0 runs --grad-accum as given. A requeued job (#SBATCH --requeue) restarts the same command:
when --out-dir already holds a complete checkpoint, --resume is added, and training continues from its newest
complete save. train.py's arguments are read with train.py's own parser (common/cli.py): --model=ar,
--batch-size=8, an abbreviated flag and the default --out-dir out/<model> mean here what they mean to
train.py.

    python cluster/slurm.py --dry-run -- --model ar --data owt ...    # print the command, start nothing
"""
import argparse
import os
import re
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))    # train.py's folder, where torchrun runs
sys.path.insert(0, ROOT)
from common import checkpoint  # noqa: E402  (the repository root, whatever the working folder)
from common import cli  # noqa: E402  (train.py's own flags)


# The global batch (sequences per optimizer step, all processes) of each recipe of paper/reproduce.mk, by
# train.py's --data: what the launcher keeps on any number of nodes unless --global-batch says otherwise.
RECIPES = {"owt": ("make train-owt", 512), "lm1b": ("make train-lm1b", 512),
           "cnndm": ("make train-cnndm", 128), "gsm8k": ("make finetune-gsm8k", 1)}


def read_hostlist(spec: str) -> tuple[int, str]:
    """(how many hosts SLURM's compressed host list names, the first of them), without listing them, so a list
    of any length reads at once: "gpu[01-03,07],cpu5" -> (5, "gpu01"), "r[1-2]-n[01-02]" -> (4, "r1-n01")
    (zero padding kept; several bracket groups in one name multiply)."""
    names, depth, start = [], 0, 0
    for i, c in enumerate(spec + ","):
        depth += (c == "[") - (c == "]")
        if depth not in (0, 1):                        # "]" before "[", or brackets inside brackets
            break
        if c == "," and depth == 0:
            names += [spec[start:i]] if spec[start:i] else []
            start = i + 1
    if depth != 0 or not names:
        raise ValueError(f"SLURM_JOB_NODELIST={spec!r} is not a SLURM host list (e.g. gpu[01-04])")
    counts, firsts = zip(*(read_name(name, spec) for name in names))
    return sum(counts), firsts[0]


def read_name(name: str, spec: str) -> tuple[int, str]:
    """(hosts, first host) of one name of a host list: "node[8-11,20]" -> (5, "node8")."""
    parts = re.split(r"\[([^\[\]]+)\]", name)            # text, group, text, group, ..., text
    if any(c in text for text in parts[::2] for c in "[]"):
        raise ValueError(f"SLURM_JOB_NODELIST={spec!r} is not a SLURM host list (e.g. gpu[01-04])")
    count, first = 1, parts[0]
    for group, text in zip(parts[1::2], parts[2::2]):
        ranges = [r.partition("-") for r in group.split(",")]
        if not all(lo.isdigit() and (not hi or hi.isdigit() and int(hi) >= int(lo)) for lo, _, hi in ranges):
            raise ValueError(f"SLURM_JOB_NODELIST: {name!r} has a range that is not numbers (low-high)")
        count *= sum(int(hi or lo) - int(lo) + 1 for lo, _, hi in ranges)
        first += ranges[0][0] + text
    return count, first


def gpus_per_node(flag: int, env) -> int:
    """--gpus-per-node, else SLURM_GPUS_ON_NODE, else SLURM_GPUS_PER_NODE ("4", "h100:4")."""
    if flag:
        return flag
    for key in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        value = env.get(key, "").split(",")[0].rpartition(":")[2]
        if value.isdigit() and int(value) > 0:
            return int(value)
    raise ValueError("no GPU count: request GPUs (#SBATCH --gpus-per-node=G) or pass --gpus-per-node G")


def parse_train(argv: list[str]):
    """train.py's arguments as train.py reads them (its parser, its defaults), except --grad-accum: None when
    not given. A bad one (or a --batch-size or --grad-accum below 1) is a ValueError (one line), here, before
    any node starts."""
    p = cli.train_parser()
    p.set_defaults(grad_accum=None)

    def error(message):
        raise ValueError(f"train.py's arguments: {message}")
    p.error = error
    args = cli.parse_train(argv, p)
    for flag, value in (("--batch-size", args.batch_size), ("--grad-accum", args.grad_accum)):
        if value is not None and value < 1:          # the batch arithmetic below divides by them
            raise ValueError(f"train.py's arguments: {flag} must be at least 1, got {value}")
    return args


def out_dir_of(argv: list[str]) -> str:
    """train.py's --out-dir among its arguments (its default out/<model> when absent)."""
    return parse_train(argv).out_dir


def with_grad_accum(argv: list[str], global_batch: int, processes: int) -> list[str]:
    """--grad-accum set so that processes x --batch-size x grad_accum = global_batch (ValueError
    otherwise)."""
    args = parse_train(argv)
    if args.grad_accum is not None:
        raise ValueError("--global-batch sets --grad-accum: leave --grad-accum out of the training arguments")
    micro = args.batch_size
    if global_batch % (processes * micro):
        raise ValueError(f"--global-batch {global_batch} is not a multiple of {processes} processes x "
                         f"--batch-size {micro}: change one of them")
    return [*argv, "--grad-accum", str(global_batch // (processes * micro))]


def recipe_batch(argv: list[str], processes: int) -> list[str]:
    """Without --global-batch: the global batch of --data's recipe (RECIPES) kept, --grad-accum set for it
    (or, given, checked against it); a --data without a recipe runs as given. A batch the recipe's cannot be
    is a ValueError naming the recipe."""
    args = parse_train(argv)
    if args.data not in RECIPES:
        return argv
    make, batch = RECIPES[args.data]
    micro = processes * args.batch_size
    if args.grad_accum is None and batch % micro == 0:
        return with_grad_accum(argv, batch, processes)
    if micro * (args.grad_accum or 1) != batch:
        accum = f" x --grad-accum {args.grad_accum}" if args.grad_accum else ""
        raise ValueError(f"--data {args.data}'s recipe ({make}) trains at a global batch of {batch}, not "
                         f"{processes} processes x --batch-size {args.batch_size}{accum} = "
                         f"{micro * (args.grad_accum or 1)}: change those to make {batch}, or set "
                         f"GLOBAL_BATCH (--global-batch) to the batch you mean (0: as given)")
    return argv


def command(train_args: list[str], env, gpus: int = 0, port: int = 29500,
            global_batch: int | None = None) -> list[str]:
    """The torchrun command of this node for SLURM's variables env (ValueError: one line)."""
    for flag, value, ok, rule in [("--gpus-per-node", gpus, gpus >= 0, "1 or more (0 = SLURM's GPU count)"),
                                  ("--port", port, 1 <= port <= 65535, "a TCP port, 1 to 65535"),
                                  ("--global-batch", global_batch, global_batch is None or global_batch >= 0,
                                   "a positive number of sequences (0 = off: --grad-accum as given)")]:
        if not ok:
            raise ValueError(f"{flag} must be {rule}, got {value}")
    args = parse_train(train_args)
    missing = [k for k in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST") if not env.get(k)]
    if missing:
        raise ValueError(f"{' and '.join(missing)} not set: run this inside a SLURM job (sbatch "
                         f"cluster/train.sbatch ...), or pass --dry-run with them set by hand")
    nodes = env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES")
    if not nodes:
        raise ValueError("SLURM_JOB_NUM_NODES (or SLURM_NNODES) not set: run this inside a SLURM job, "
                         "or set it")
    if not nodes.isdigit() or int(nodes) < 1:
        raise ValueError(f"SLURM_JOB_NUM_NODES={nodes!r} is not a node count")
    hosts, host = read_hostlist(env["SLURM_JOB_NODELIST"])
    if hosts != int(nodes):
        raise ValueError(f"SLURM_JOB_NODELIST={env['SLURM_JOB_NODELIST']!r} names {hosts} hosts, but "
                         f"SLURM_JOB_NUM_NODES={nodes}: set both from one job (run this inside it)")
    G = gpus_per_node(gpus, env)
    if global_batch is None:
        train_args = recipe_batch(train_args, int(nodes) * G)
    elif global_batch:
        train_args = with_grad_accum(train_args, global_batch, int(nodes) * G)
    if not args.resume and checkpoint.newest(os.path.join(ROOT, args.out_dir)):
        train_args = [*train_args, "--resume"]                 # a requeued job continues its run
    return ["torchrun", "--nnodes", nodes, "--nproc-per-node", str(G), "--rdzv-backend", "c10d",
            "--rdzv-endpoint", f"{host}:{port}", "--rdzv-id", env["SLURM_JOB_ID"], "train.py", *train_args]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpus-per-node", type=int, default=0,
                   help="processes per node (default: SLURM's GPU count)")
    p.add_argument("--port", type=int, default=29500, help="rendezvous port on the first node")
    p.add_argument("--global-batch", type=int, default=None,
                   help="sequences per optimizer step over all processes (default: the recipe's of --data "
                        "owt, lm1b, cnndm or gsm8k, else --grad-accum as given; 0: as given)")
    p.add_argument("--dry-run", action="store_true", help="print the command instead of running it")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then train.py's arguments")
    args = p.parse_args(argv)
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    try:
        if not train_args:
            raise ValueError("give train.py's arguments after --, e.g. -- --model ar --data owt")
        cmd = command(train_args, os.environ, args.gpus_per_node, args.port, args.global_batch)
    except ValueError as e:
        sys.exit(f"error: {e}")
    if args.dry_run:
        print(shlex.join(cmd))
        return cmd
    os.chdir(ROOT)                               # a relative --out-dir / --data-dir: from the repository root
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
