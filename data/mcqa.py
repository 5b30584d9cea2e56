"""Zero-shot multiple choice for the OWT models: HellaSwag, PIQA, Social IQa (validation splits), with the
prompts of the official scripts/eval/mcqa_eval.py (texts whitespace-normalised, HellaSwag's ctx_b
capitalised):

    hellaswag  "Activity: {activity_label}\\nContext: {ctx_a} {ctx_b}\\nContinuation:"   endings[0..3],
                                                                                        label 0-based
    piqa       "Question: Which option best accomplishes the following goal?\\n{goal}\\nAnswer:"   sol1, sol2
    siqa       "Context: {context}\\nQuestion: {question}\\nAnswer:"   answerA/B/C, label 1-based

An option is scored as " " + option after the prompt (zeroshot.py). load(name, data_dir) -> list of
{"prompt": str, "options": [str], "label": int}. Sources: the Hub (Rowan/hellaswag, ybisk/piqa,
allenai/social_i_qa, their parquet conversions: the latter two are loading scripts, which datasets no longer
runs) or --data-dir with the files in the Hub's or the original formats: *.parquet or *.jsonl records, and
when the records have no "label", the labels one per line in a *labels.lst (PIQA's valid-labels.lst, SIQA's
dev-labels.lst).
"""
import glob
import json
import os

NAMES = ("hellaswag", "piqa", "siqa")
HUB = {"hellaswag": "Rowan/hellaswag", "piqa": "ybisk/piqa", "siqa": "allenai/social_i_qa"}


def normalize(text) -> str:
    return " ".join(str(text).strip().split())


def hellaswag(ex: dict) -> dict:
    ctx_b = normalize(ex.get("ctx_b", ""))
    context = " ".join(p for p in [normalize(ex.get("ctx_a", "")), ctx_b[:1].upper() + ctx_b[1:]] if p)
    label = normalize(ex.get("activity_label", ""))
    prompt = "\n".join(([f"Activity: {label}"] if label else []) + [f"Context: {context}", "Continuation:"])
    return {"prompt": prompt, "options": [normalize(o) for o in ex["endings"]], "label": int(ex["label"])}


def piqa(ex: dict) -> dict:
    prompt = f"Question: Which option best accomplishes the following goal?\n{normalize(ex['goal'])}\nAnswer:"
    return {"prompt": prompt, "options": [normalize(ex["sol1"]), normalize(ex["sol2"])],
            "label": int(ex["label"])}


def siqa(ex: dict) -> dict:
    prompt = f"Context: {normalize(ex['context'])}\nQuestion: {normalize(ex['question'])}\nAnswer:"
    return {"prompt": prompt, "options": [normalize(ex[k]) for k in ("answerA", "answerB", "answerC")],
            "label": int(str(ex["label"]).strip()) - 1}


BUILD = {"hellaswag": hellaswag, "piqa": piqa, "siqa": siqa}


def read_local(data_dir: str) -> list[dict]:
    if not os.path.isdir(data_dir):
        raise FileNotFoundError(f"--data-dir {data_dir}: no such folder")
    if files := sorted(glob.glob(os.path.join(data_dir, "*.parquet"))):
        import datasets
        records = list(datasets.load_dataset("parquet", data_files=files, split="train"))
    elif files := sorted(glob.glob(os.path.join(data_dir, "*.jsonl"))):
        records = [json.loads(line) for f in files for line in open(f) if line.strip()]
    else:
        raise FileNotFoundError(f"--data-dir {data_dir} holds no .parquet or .jsonl files")
    if records and "label" not in records[0]:
        labels = sorted(glob.glob(os.path.join(data_dir, "*labels.lst")))
        if not labels:
            raise FileNotFoundError(f"the records in {data_dir} have no label, and there is no "
                                    f"*labels.lst file")
        values = [line.strip() for line in open(labels[0]) if line.strip()]
        if len(values) != len(records):
            raise ValueError(f"{labels[0]} has {len(values)} labels for {len(records)} records")
        records = [{**r, "label": v} for r, v in zip(records, values)]
    return records


def load(name: str, data_dir: str | None = None) -> list[dict]:
    """The validation split of benchmark name as prompt/options/label examples."""
    if data_dir is not None:
        records = read_local(data_dir)
    else:
        import datasets
        try:
            records = list(datasets.load_dataset(HUB[name], split="validation",
                                                 revision="refs/convert/parquet"))
        except Exception as e:
            raise FileNotFoundError(f"cannot load {HUB[name]} from the Hugging Face Hub "
                                    f"({type(e).__name__}): check the network, or pass --data-dir with its "
                                    f"validation files") from None
    try:
        return [BUILD[name](r) for r in records]
    except (KeyError, ValueError, TypeError) as e:
        raise ValueError(f"the {name} records are not in its format ({type(e).__name__}: {e})") from None
