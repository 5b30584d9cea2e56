"""Logits -> tokens, for all four samplers. The core comes first; it is all a reader of the methods needs:

    Settings   how to decode: what every method's generate(model, prompt, cfg, settings, prompt_mask, stop,
               generator) takes: the fields every sampler reads, those one method reads named for it, and the
               paper mode's (PaperMode) grouped apart; a method reads the fields named in its KNOBS (data on
               the method, not a branch on its name).
    choose     logits -> a token and its confidence: the probability under the final distribution, computed as
               the official `_generate_unconditional` does (exp(logits - logsumexp) in float32).
    confident  the confidence rule of the diffusion samplers: decode the most confident candidate plus every
               candidate with confidence >= tau (tau = inf: exactly one per step).
    decode     greedy + the rule, as the reference samplers state it.
    Picker     built once per generate call: pick(logits, cols, candidates) -> tokens, decoded. It applies the
               paper presets' options (SamplerOptions, the second section: penalties, nucleus, early stops;
               off unless the CNN/DM, ROCStories or OWT preset turns them on), then the confidence rule.

A token's confidence is its probability under the final distribution (penalties, temperature, nucleus), so
the diffusion samplers' threshold rule and their top-1 pick use the same number. The last sections are for
reproduction only (settings.paper.official, paper mode): the official's pick among tied confidences, its
low-confidence stop and an infilling penalty's context, where they differ from the rules above.
"""
import math
from dataclasses import dataclass, field

import torch


# ----------------------------------------------------------------------------- the core

@dataclass
class PaperMode:
    """What only reproducing the paper needs (the method files' last sections, docs/fidelity.md); all off by
    default, and a learner's run never sets it."""
    official: bool = False          # decode as the official code: block alignment, BD3-LM infilling, penalty
                                    # counts, cache crop (released checkpoints; eval.py --official)
    seq_len: int | None = None      # the model's context L: the official cache crop past L, MDLM's official
                                    # canvas width, Set Diffusion's "fht" schedule
    options: "SamplerOptions | None" = None   # the paper presets' penalties, nucleus and stops; None = off


@dataclass
class Settings:
    """How to decode: the one argument every method's generate takes beside the prompt. A method reads the
    fields in its KNOBS ("paper.official" for a PaperMode field) and ignores the rest (AR decodes one token
    per step whatever the threshold)."""
    max_new_tokens: int = 64        # N new tokens after the prompt ([MASK]s inside the prompt are filled too)
    threshold: float = math.inf     # tau: decode the top-1 plus every token with p >= tau (inf: one per step)
    temperature: float = 0.0        # 0 = greedy
    setdiffusion_window: int = 0    # Set Diffusion: W positions predicted per step; 0 = smax // 2
    setdiffusion_commit_order: str = "l2r"   # Set Diffusion: commit a step's tokens left to right, or "fht"
    mdlm_block: int = 32            # MDLM: the semi-autoregressive block width (the paper's GSM8K baseline)
    paper: PaperMode = field(default_factory=PaperMode)     # reproduction only


def check_settings(s: Settings):
    """Raise a ValueError with one clear line for an out-of-range or non-finite setting: the one place each
    decoding rule is written (the scripts call the same functions on their flags, before any work). The
    window's upper bound is the method's (SetDiffusionConfig.window: at most smax)."""
    if not s.max_new_tokens >= 0:
        raise ValueError(f"max new tokens must be >= 0, got {s.max_new_tokens}")
    check_threshold(s.threshold)
    check_temperature(s.temperature)
    if s.mdlm_block < 1:
        raise ValueError(f"the MDLM block must be >= 1, got {s.mdlm_block}")
    if s.setdiffusion_commit_order not in ("l2r", "fht"):
        raise ValueError(f"commit order must be 'l2r' or 'fht', got {s.setdiffusion_commit_order!r}")
    if s.paper.options is not None:
        check(s.paper.options, s.temperature)


def check_threshold(tau: float, name: str = "the threshold") -> float:
    """tau in (0, 1], or inf for one token per step (ValueError naming `name`: a flag, or where tau came
    from)."""
    if not (0 < tau <= 1 or tau == math.inf):
        raise ValueError(f"{name} {tau}: a confidence threshold must be in (0, 1], or inf for one token per "
                         "step")
    return tau


def check_temperature(t: float, name: str = "the temperature") -> float:
    """A sampling temperature: a finite number >= 0 (0 = greedy)."""
    if not (math.isfinite(t) and t >= 0):
        raise ValueError(f"{name} {t}: the temperature must be a finite number >= 0 (0 = greedy)")
    return t


def choose(logits, temperature=0.0, generator=None, track=None, draw=None):
    """Logits (..., V) -> token (...) and its confidence (...): greedy, or sampled at temperature with top-p.
    Probabilities are exp(logits - logsumexp(logits)) in float32, the official `_forward` arithmetic: near
    p = 1 it rounds differently from softmax, and the diffusion samplers' confidence ties follow its
    rounding. draw (...) bool: sample only those slots, in row-major order (the rest greedy), so that the
    random stream is the official's where it draws for fewer slots than the sampler predicts."""
    logits = logits.float()
    scaled = logits / temperature if temperature > 0 else logits                   # (..., V)
    probs = (scaled - torch.logsumexp(scaled, dim=-1, keepdim=True)).exp()
    if track is not None and track.opt.top_p < 1:
        probs = nucleus(probs, track.opt.top_p)
    if temperature > 0:
        drawn = probs.reshape(-1, probs.shape[-1]) if draw is None else probs[draw]     # (n, V)
        y = torch.multinomial(drawn, 1, generator=generator).squeeze(-1)                # (n,)
        y = y.view(probs.shape[:-1]) if draw is None else probs.argmax(-1).masked_scatter(draw, y)
        return y, probs.gather(-1, y[..., None]).squeeze(-1)
    conf, y = probs.max(-1)        # the official's argmax: the first of equal maxima (max: one pass, not two)
    return y, conf


def confident(conf, candidates, threshold: float):
    """The confidence rule of the diffusion samplers (MDLM's, used by BD3-LM and Set Diffusion as the
    official).

    conf (B, K): the probability of the token predicted at each of K slots; candidates (B, K): the slots that
    may be decoded now. Decode the most confident candidate of each row plus every candidate with confidence
    >= threshold, so threshold = inf decodes exactly one token per row and step (and a K = 1 step, AR's, its
    one candidate). Among tied top candidates the rightmost is decoded: the official keeps the last of
    `conf.argsort()`. Returns decoded (B, K) bool."""
    conf = conf.masked_fill(~candidates, -1.0)
    decoded = (conf >= threshold) & candidates
    K = conf.shape[1]
    top = K - 1 - conf.flip(-1).argmax(-1, keepdim=True)                    # (B, 1) rightmost maximum
    return decoded.scatter_(1, top, decoded.gather(1, top) | candidates.any(1, keepdim=True))


def decode(logits, candidates, mask_id: int, threshold: float = math.inf):
    """Greedy decoding by the confidence rule with no options, as the reference samplers state it:
    logits (B, K, V) -> tokens (B, K), decoded (B, K). A Picker with default Settings does the same."""
    logits = logits.float()
    logits[..., mask_id] = float("-inf")                                    # never predict [MASK]
    y, conf = choose(logits)
    return y, confident(conf, candidates, threshold)


class Picker:
    """Logits -> tokens for one generate call; every sampler calls it once per step.

    pick(logits (B, K, V), cols (B, K), candidates (B, K), draw=None) -> tokens (B, K), decoded (B, K): the
    [MASK] logit suppressed (never predict it), the options applied (penalties need the canvas and each
    slot's column `cols`), a token chosen per slot (greedy, or sampled: every slot, or only those of `draw`
    (B, K), in the official's random stream) and the confidence rule. pick.stopped (B,) bool: rows
    the low-confidence rule has stopped. pick.stop: the task's stop hook with the entropy rule folded in, or
    None (the sampler checks it where the official sampler checks its stopping criteria)."""

    def __init__(self, settings: Settings, canvas, real, mask_id: int, prompt, prompt_mask=None, stop=None,
                 generator=None):
        check_settings(settings)
        self.settings, self.canvas, self.mask_id, self.generator = settings, canvas, mask_id, generator
        self.track = start(settings.paper.options, canvas, real, mask_id)          # None: no options
        if settings.paper.official:
            infill_context(self.track, canvas, real, prompt, prompt_mask, mask_id)
        self.stop = entropy_stop(stop, self.track, prompt, prompt_mask, mask_id, settings.max_new_tokens,
                                 settings.paper.official)
        self.none_stopped = torch.zeros(canvas.shape[0], dtype=torch.bool, device=canvas.device)

    @property
    def stopped(self):
        return self.none_stopped if self.track is None else self.track.stopped

    def __call__(self, logits, cols, candidates, draw=None):
        s, track = self.settings, self.track
        logits = logits.float()
        logits[..., self.mask_id] = float("-inf")                              # never predict [MASK]
        if track is None and s.temperature == 0 and logits.shape[1] == 1:     # AR greedy: no softmax needed
            return logits.max(-1)[1], candidates.clone()                      # argmax, in half its time
        at(track, self.canvas, cols)
        y, conf = choose(process(logits, track), s.temperature, self.generator, track, draw)   # (B, K)
        if s.paper.official and conf.shape[1] > 1:    # paper mode: the official's order among tied tokens
            decoded = official_confident(conf, candidates, s.threshold, draw)
        else:
            decoded = confident(conf, candidates, s.threshold)
        if s.paper.official:                          # paper mode: the stop hook applies the official rule
            remember(track, conf, cols, decoded, draw)
        else:
            early_stop(track, conf, decoded)
        return y, decoded

# ----------------------------------------------------------------------------- the paper presets' options

@dataclass
class SamplerOptions:
    """The paper presets' options, all off by default (data/cnndm.py, data/rocstories.py and data/owt.py set
    them), each as the official code applies it:

    repetition penalty p: (HF RepetitionPenaltyLogitsProcessor) a token already seen has its logit divided by
        p if positive, multiplied by p if negative. "Seen" = the tokens generated so far (the official
        diffusion samplers' running_generation), plus the prompt's visible tokens with penalize_context (HF
        generate's input_ids, the official AR and infilling); with penalize_context and a pad_id, tokens equal
        to pad_id are not seen (the official diffusion samplers' _visible_infill_context). Infilling without
        penalize_context in paper mode: what each official sampler's running_generation holds
        (infill_context).
    length penalty (s, f): (HF ExponentialDecayLengthPenalty, start counted in new tokens as the official
        wrapper does) at a slot with n > s new tokens before it, the EOS logit gets |logit| * (f^(n - s) - 1)
        added: pushed up whatever its sign. n counts the VISIBLE new tokens left of the slot (decoded, not
        pad_id: the official _length_penalty_prefix_lengths), not the slot's index: a diffusion sampler that
        decodes out of order leaves [MASK]s there, which do not count.
    min_new_tokens m: (HF MinNewTokensLengthLogitsProcessor) EOS is impossible at slots with n < m (the same
        n).
    temperature, top_p: sample from softmax(logits / temperature), cut to the smallest set of most likely
        tokens whose mass reaches top_p (nucleus), renormalised. temperature 0 = greedy.
    low-confidence stop: (the official EntropyEosStoppingCriteria confidence rule, OWT unconditional) a row
        stops once stop_patience consecutive new tokens, counted after the first stop_min_tokens, were decoded
        with probability < stop_confidence.
    entropy stop: (the official EntropyEosStoppingCriteria entropy rule, OWT unconditional) a row stops where
        its stop hook is checked (every AR token, MDLM/BD3-LM block ends, every W Set Diffusion steps: where
        the official calls its stopping criteria) once it has >= max(stop_min_tokens, 1) new tokens and >=
        stop_entropy_window tokens (prompt counted), and the unigram entropy (nats) of the last
        stop_entropy_window tokens up to the check, [MASK]s left out, is < stop_entropy (`EntropyStop`).
    """
    top_p: float = 1.0                 # nucleus mass, (0, 1]; needs temperature > 0 below 1
    repetition_penalty: float = 1.0    # p > 0; 1 = off
    penalize_context: bool = False     # also count the prompt's visible tokens as seen
    length_penalty: tuple = ()         # (start, factor) or () = off
    min_new_tokens: int = 0            # EOS forbidden before this many new tokens
    stop_confidence: float = 0.0       # low-confidence stop threshold; 0 = off
    stop_patience: int = 1             # consecutive low-confidence tokens that stop a row
    stop_min_tokens: int = 0           # new tokens never counted by the stop rules
    stop_entropy: float = 0.0          # entropy stop threshold in nats (official 4); 0 = off
    stop_entropy_window: int = 128     # the last tokens whose unigram entropy is measured (official 128)
    eos_id: int = -1                   # needed by the length penalty and min_new_tokens
    pad_id: int = -1                   # the official diffusion samplers' pad id (= EOS for GPT-2 and Qwen):
                                       # not counted by the length penalties, nor penalised as context; -1
                                       # (HF generate, the AR presets): counted as any token


def check(opt: SamplerOptions, temperature: float = 0.0):
    """Raise a ValueError with one clear line for contradictory, out-of-range or non-finite options."""
    numbers = [opt.top_p, opt.repetition_penalty, opt.stop_confidence, opt.stop_entropy, *opt.length_penalty]
    if not all(math.isfinite(x) for x in numbers):
        raise ValueError(f"sampler options must be finite numbers, got {opt}")
    if not 1e-30 <= opt.top_p <= 1:             # float32 rounds a smaller nucleus mass to 0: no token kept
        raise ValueError(f"top-p must be {'>= 1e-30' if 0 < opt.top_p < 1 else 'in (0, 1]'}, got {opt.top_p}")
    if opt.top_p < 1 and temperature <= 0:
        raise ValueError("top-p < 1 needs sampling: set a temperature > 0 (temperature 0 is greedy)")
    if opt.repetition_penalty <= 0:
        raise ValueError(f"the repetition penalty must be > 0 (1 = off), got {opt.repetition_penalty}")
    if opt.length_penalty and (len(opt.length_penalty) != 2 or opt.length_penalty[0] < 0
                               or opt.length_penalty[1] <= 0):
        raise ValueError(f"the length penalty is (start >= 0, factor > 0), got {opt.length_penalty}")
    if opt.min_new_tokens < 0 or opt.stop_min_tokens < 0 or opt.stop_patience < 1:
        raise ValueError("min new tokens and stop min tokens must be >= 0, stop patience >= 1")
    if not 0 <= opt.stop_confidence < 1:
        raise ValueError(f"the low-confidence stop threshold must be in [0, 1), got {opt.stop_confidence}")
    if opt.stop_entropy < 0 or opt.stop_entropy_window < 1:
        raise ValueError(f"the entropy stop needs a threshold >= 0 (0 = off) and a window >= 1, got "
                         f"{opt.stop_entropy} and {opt.stop_entropy_window}")
    if (opt.length_penalty or opt.min_new_tokens) and opt.eos_id < 0:
        raise ValueError("the length penalty and min new tokens need the tokenizer's eos_id")


@dataclass
class Track:
    """What a sampler knows about its rows between steps (one per generate call)."""
    opt: SamplerOptions
    counted: torch.Tensor    # (B, C) canvas columns whose tokens count as seen (generated, or the context)
    first: torch.Tensor      # (B,) canvas column of each row's first generated token
    strikes: torch.Tensor    # (B,) consecutive low-confidence tokens so far
    stopped: torch.Tensor    # (B,) bool, rows the low-confidence rule stopped
    mask_id: int = -1
    tokens: torch.Tensor = None   # (B, C) the canvas now
    n: torch.Tensor = None        # (B, K) the slots' index among the new tokens (the low-confidence stop)
    shown: torch.Tensor = None    # (B, K) visible new tokens left of each slot (the length penalties)
    confs: torch.Tensor = None    # (B, C) paper mode: each new token's confidence as the official keeps it
    context: torch.Tensor = None  # (B, C) paper mode, infilling: the columns the official's penalty reads
    visible: torch.Tensor = None  # (B, C) ... and the prompt's visible columns, gen: those to generate
    gen: torch.Tensor = None


def start(opt, tokens, real, mask_id: int):
    """A Track for a canvas tokens (B, C) whose [MASK]s (real (B, C)) are to be generated; None without
    options (checked with the settings: check_settings)."""
    if opt is None:
        return None
    gen = (tokens == mask_id) & real                                      # (B, C) columns to generate
    B = tokens.shape[0]
    return Track(opt, real & (gen | opt.penalize_context), gen.float().argmax(1),
                 torch.zeros(B, dtype=torch.long, device=tokens.device),
                 torch.zeros(B, dtype=torch.bool, device=tokens.device), mask_id)


def at(track, tokens, cols):
    """Point the track at this step: the canvas tokens (B, C) and the slots' canvas columns cols (B, K)."""
    if track is None:
        return None
    track.tokens, track.n = tokens, cols - track.first[:, None]
    if track.opt.length_penalty or track.opt.min_new_tokens:
        col = torch.arange(tokens.shape[1], device=tokens.device)
        shown = (tokens != track.mask_id) & (tokens != track.opt.pad_id) & (col >= track.first[:, None])
        # (B, K) visible columns in [first, slot): an exclusive prefix count, read at each slot's column
        track.shown = torch.nn.functional.pad(shown.long().cumsum(1), (1, 0)).gather(1, cols)
    return track


def process(logits, track):
    """Repetition penalty, length penalty and min new tokens on logits (B, K, V) at the track's slots."""
    if track is None:
        return logits
    opt, logits = track.opt, logits.float().clone()
    if opt.repetition_penalty != 1.0:
        B, V = logits.shape[0], logits.shape[-1]
        counted = track.counted
        if opt.penalize_context:                     # the official infilling context: pad ids not seen
            counted = counted & (track.tokens != opt.pad_id)
        if track.context is not None:                # paper mode, infilling: the official sampler's columns
            counted = track.context
        seen = torch.zeros(B, V, device=logits.device).scatter_add_(
            1, track.tokens, counted.float()) > 0                           # (B, V)
        p = opt.repetition_penalty
        penalised = torch.where(logits < 0, logits * p, logits / p)
        logits = torch.where(seen[:, None, :], penalised, logits)
    eos = logits[..., opt.eos_id] if opt.eos_id >= 0 else None            # (B, K)
    if opt.length_penalty:
        s, f = opt.length_penalty
        boost = eos.abs() * (f ** (track.shown - s).clamp(min=0).double() - 1).float()   # 0 where n <= s
        eos = eos + boost
    if opt.min_new_tokens:
        eos = eos.masked_fill(track.shown < opt.min_new_tokens, float("-inf"))
    if eos is not None:
        logits[..., opt.eos_id] = eos
    return logits


def nucleus(probs, top_p: float):
    """Keep the most likely tokens until their mass reaches top_p (at least one), renormalised. (..., V)"""
    sorted_p, idx = probs.sort(-1, descending=True)
    keep = sorted_p.cumsum(-1) - sorted_p < top_p                        # mass before this token < p
    kept = torch.zeros_like(probs).scatter_(-1, idx, sorted_p * keep)
    return kept / kept.sum(-1, keepdim=True)


def early_stop(track, conf, decoded):
    """The low-confidence stop: walk the decoded slots (B, K) left to right, count consecutive tokens with
    confidence < stop_confidence after the first stop_min_tokens; a row stops at stop_patience of them, every
    token it decoded kept. Paper mode applies the official rule instead, where the stop hook is checked
    (OfficialConfidenceStop)."""
    opt = track.opt if track is not None else None
    if opt is None or opt.stop_confidence <= 0:
        return
    for k in range(conf.shape[1]):
        live = decoded[:, k] & (track.n[:, k] >= opt.stop_min_tokens)    # (B,)
        low = conf[:, k] < opt.stop_confidence
        track.strikes = torch.where(live, torch.where(low, track.strikes + 1, 0), track.strikes)
        track.stopped |= track.strikes >= opt.stop_patience

# ----------------------------------------------------------------------------- the entropy stop

def window_entropy(row, mask_id: int) -> float:
    """Entropy (nats) of the unigram distribution of the tokens of row (a 1-D tensor), [MASK]s left out, as
    the official _compute_entropy (torch.special.entr of the counts' frequencies); inf when nothing is
    left."""
    row = row[row != mask_id]
    if row.numel() == 0:
        return float("inf")
    counts = torch.unique(row, return_counts=True)[1].double()
    return float(torch.special.entr(counts / counts.sum()).sum())


class EntropyStop:
    """A sampler stop hook (tokens, end) -> (B,) bool: the wrapped hook `base` (None: none) or the entropy
    rule. The rule, for a row whose canvas [left-padded prompt (P) | new tokens] is decided up to column end:
    at least max(stop_min_tokens, 1) new tokens (end - P), at least stop_entropy_window tokens from its first
    real column, and window_entropy(tokens[end - window:end]) < stop_entropy. `ends` (B,) keeps the column
    each row first stopped at by this rule alone (-1: it did not): rows the base hook or the low-confidence
    rule stop are not counted, the official order (EOS, then low confidence, then entropy). `cut(b)` is the
    official legacy truncation of such a row (low_entropy_truncation=legacy: its last window dropped)."""

    def __init__(self, base=None):
        self.base, self.track, self.ends, self.confidence = base, None, None, None

    def attach(self, track, prompt, prompt_mask, mask_id: int, official: bool = False):
        """Bind to a sampler's track (its options and low-confidence stops), prompt (B, P) and [MASK] id.
        official (paper mode, with a low-confidence stop): that rule is checked here, after the base hook's,
        as the official checks it (OfficialConfidenceStop)."""
        B, self.P = prompt.shape
        self.mask_id = mask_id
        self.first = ((~prompt_mask).sum(1) if prompt_mask is not None else
                      torch.zeros(B, dtype=torch.long, device=prompt.device)).tolist()
        self.track, self.ends = track, [-1] * B
        if official and track.opt.stop_confidence > 0:
            self.confidence = OfficialConfidenceStop(track, self.P)
        return self

    def __call__(self, tokens, end):
        done = self.base(tokens, end) if self.base is not None else torch.zeros_like(end, dtype=torch.bool)
        if self.track is None:                     # never attached: the option is off, or nothing to generate
            return done
        if self.confidence is not None:            # paper mode: the official's order, EOS then low confidence
            done = done | self.confidence(end, done)
        opt, low = self.track.opt, []
        if opt.stop_entropy <= 0:
            return done
        for b, e in enumerate(end.tolist()):
            long_enough = (e - self.P >= max(opt.stop_min_tokens, 1)
                           and e - self.first[b] >= opt.stop_entropy_window)
            low.append(long_enough and window_entropy(tokens[b, e - opt.stop_entropy_window:e],
                                                      self.mask_id) < opt.stop_entropy)
        low = torch.tensor(low, device=done.device) & ~done
        for b in (low & ~self.track.stopped).nonzero().flatten().tolist():
            self.ends[b] = end[b].item() if self.ends[b] < 0 else self.ends[b]
        return done | low

    def cut(self, b: int):
        """The official truncation of row b, None if neither rule stopped it: by low confidence (paper mode)
        its columns up to the token that stopped it; by low entropy (legacy) its columns before
        max(end - window, P + min tokens) (the official min_truncate_idx), end the column it stopped at."""
        if self.confidence is not None and self.confidence.cuts[b] >= 0:
            return self.confidence.cuts[b]
        e = self.ends[b]
        if e < 0:
            return None
        opt = self.track.opt
        return min(max(e - opt.stop_entropy_window, self.P + max(opt.stop_min_tokens, 1)), e)


def entropy_stop(stop, track, prompt, prompt_mask, mask_id: int, max_new_tokens: int, official=False):
    """The stop hook a sampler uses: stop with the entropy rule added when its options ask for it
    (stop_entropy > 0 and new tokens to generate), and in paper mode (official) the low-confidence rule
    (stop_confidence > 0), else stop itself, so nothing changes with the options off. A stop that is already
    an EntropyStop (common/unconditional.py's, which reads its cut) is bound, not wrapped."""
    wanted = track is not None and (track.opt.stop_entropy > 0 or official and track.opt.stop_confidence > 0)
    if not wanted or max_new_tokens == 0:
        return stop
    hook = stop if isinstance(stop, EntropyStop) else EntropyStop(stop)
    return hook.attach(track, prompt, prompt_mask, mask_id, official)


# ----------------------------------------------------------------------------- reproduction only: tied tokens

# The official top-1 is the last of `conf.argsort(dim=-1)` (torch's default, stable=False) over its row of
# slots, its decoded slots at +inf: among tied most-confident tokens, the one that sort leaves last. Which
# that is depends on the device and the row's length, not on a rule of its own (docs/fidelity.md: on a CPU
# index order up to 16 slots, introsort's order beyond; on CUDA a bitonic network's up to 32, index order
# beyond). Paper mode calls the same sort on the same row, so it picks what the official picks on the device
# it runs on; the default keeps the rightmost (`confident`).

def official_confident(conf, candidates, threshold: float, row=None):
    """`confident` with the official's top-1 (official_top): decoded (B, K) bool. row (B, K): the slots of
    the official's row (None: all K), the same slots its sampled stream draws for (Picker's draw)."""
    top = official_top(conf, candidates, row)                                 # (B,) -1: no candidate
    hit = torch.arange(conf.shape[1], device=conf.device) == top[:, None]     # (B, K) none where top = -1
    return (conf >= threshold) & candidates | hit


def official_top(conf, candidates, row=None):
    """The slot (B,) the official decodes as its most confident, -1 where a row has no candidate: each row's
    slots in `row` (B, K) laid out left to right as the official's tensor (K slots, or the row's ones), its
    candidates' confidences and +inf for the slots it already decoded, sorted by torch.argsort (not stable),
    and the last finite entry taken. Rows are sorted at their own length, as the official sorts one prompt."""
    B, K = conf.shape
    row = torch.ones_like(candidates) if row is None else row
    keys = conf.float().masked_fill(~candidates, math.inf)                   # (B, K)
    n = row.sum(1)                                                           # (B,) the official's row length
    top = torch.full((B,), -1, dtype=torch.long, device=conf.device)
    slots = torch.argsort((~row).to(torch.uint8), dim=1, stable=True)        # (B, K) the row's slots first
    for k in n[candidates.any(1)].unique().tolist():
        rows = (n == k) & candidates.any(1)                                  # (b,) the rows of this length
        idx = slots[rows, :k]                                                # (b, k) slot of each entry
        order = keys[rows].gather(1, idx).argsort(dim=-1)                    # (b, k) the official's sort
        last = k - 1 - (~candidates[rows].gather(1, idx)).sum(1, keepdim=True)   # (b, 1) before the +infs
        top[rows] = idx.gather(1, order.gather(1, last))[:, 0]
    return top


# ----------------------------------------------------------------------------- reproduction only: the stops

# The official checks its low-confidence stop (EntropyEosStoppingCriteria._confidence_stop) only where it
# checks its stopping criteria (every W steps for Set Diffusion, at block ends for MDLM and BD3-LM, each token
# for AR), after its EOS rule; it walks the decoded positions in position order, skips the first
# max(min tokens, 1) it meets and cuts the sample after the token that stops it. The confidence it reads of
# a position is the last one its sampler wrote there: Set Diffusion and AR write a token's own, once; MDLM and
# BD3-LM write every slot of the block that holds a token after each step, so a token decoded early carries
# the probability of the argmax (or draw) at its slot in its block's last step.

def remember(track, conf, cols, decoded, row=None):
    """Paper mode: write this step's confidences conf (B, K) where the official writes them: at the slots of
    its row (row (B, K), None: all K) that hold a token after the step (decoded now or before), indexed by
    new-token index (the slots' columns cols (B, K))."""
    if track is None or track.opt.stop_confidence <= 0:
        return
    if track.confs is None:
        track.confs = torch.full(track.tokens.shape, math.nan, device=conf.device)     # (B, C) by index
    row = torch.ones_like(decoded) if row is None else row
    held = (decoded | (track.tokens.gather(1, cols) != track.mask_id)) & row & (track.n >= 0)   # (B, K)
    n = track.n.clamp(0, track.confs.shape[1] - 1)
    track.confs.scatter_(1, n, torch.where(held, conf.float(), track.confs.gather(1, n)))


class OfficialConfidenceStop:
    """The official low-confidence stop, checked where the stop hook is (EntropyStop, after its base hook):
    call(end (B,), done (B,)) -> (B,) rows it stops now. For a row not done, the new tokens before column
    end that hold a confidence (Track.confs), in position order, those not met at an earlier check: the first
    max(stop_min_tokens, 1) met are skipped (strikes reset), then each adds a strike below stop_confidence or
    resets them; at stop_patience strikes the row stops, cuts[b] = the column after that token (its
    truncate_idx: the official keeps the [MASK]-free output's columns before it). No token to read resets
    the strikes."""

    def __init__(self, track, P: int):
        B = track.first.shape[0]
        self.track, self.P = track, P
        self.met, self.strikes, self.cuts = [set() for _ in range(B)], [0] * B, [-1] * B

    def __call__(self, end, done):
        opt, confs = self.track.opt, self.track.confs
        stops = torch.zeros_like(done)
        for b, e in enumerate(end.tolist()):
            if done[b] or confs is None:
                continue
            row = confs[b, :max(e - self.P, 0)]
            held = (~row.isnan()).nonzero().flatten().tolist()
            if not held:
                self.strikes[b] = 0
                continue
            new = [j for j in held if j not in self.met[b]]
            skip = min(max(max(opt.stop_min_tokens, 1) - len(self.met[b]), 0), len(new))
            if skip:
                self.met[b].update(new[:skip])
                new, self.strikes[b] = new[skip:], 0
            for j in new:
                self.met[b].add(j)
                self.strikes[b] = self.strikes[b] + 1 if row[j] < opt.stop_confidence else 0
                if self.strikes[b] >= opt.stop_patience:
                    stops[b], self.cuts[b] = True, min(self.P + j + 1, e)
                    break
        return stops


# ----------------------------------------------------------------------------- reproduction only: penalties

# Infilling with a repetition penalty but without penalize_context (the official's
# infill_repetition_penalty_include_right_context off), each official sampler penalises what its
# running_generation holds, which is not the span decoded so far: MDLM its whole canvas (the prompt on both
# sides, pad ids included, and the span as decoded), BD3-LM its canvas up to the end of the block it decodes
# (bd3lm.official_context), Set Diffusion the tokens of its KV cache when a step starts (the whole visible
# prompt, and a span token only from the step after the one that commits it: setdiffusion.official_context).

def infill_context(track, canvas, real, prompt, prompt_mask, mask_id: int):
    """Paper mode: when the prompt holds [MASK]s and the options penalise repetitions without
    penalize_context, set track.context to MDLM's official columns, every column of the canvas (the
    methods whose official reads other columns update it), and keep track.visible and track.gen (B, C)."""
    if track is None or track.opt.repetition_penalty == 1.0 or track.opt.penalize_context:
        return
    visible = prompt_mask if prompt_mask is not None else torch.ones_like(prompt, dtype=torch.bool)
    if not ((prompt == mask_id) & visible).any():                     # no infilling: the generated region
        return
    track.gen = (canvas == mask_id) & real
    track.visible = real & ~track.gen
    track.context = real.clone()
