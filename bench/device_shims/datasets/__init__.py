"""Import stand-in for `datasets`, used by bench/gpu_device_check.sh only when the GPU machine lacks the package
(it cannot be brought: pyarrow alone is past the 64 MiB the machine accepts). TRL 1.15 imports `Dataset` and
`IterableDataset` at module level; AsyncGRPOTrainer trains from its rollout queue, so a list of rows is all the
check's trainer needs. Without package metadata, transformers' `is_datasets_available()` stays False."""


class Dataset(list):
    @classmethod
    def from_dict(cls, columns: dict) -> "Dataset":
        keys = list(columns)
        return cls(dict(zip(keys, row)) for row in zip(*(columns[k] for k in keys)))

    @property
    def column_names(self) -> list[str]:
        return list(self[0]) if self else []


class IterableDataset:
    pass


class DatasetDict(dict):
    pass


class IterableDatasetDict(dict):
    pass


def concatenate_datasets(parts):
    return Dataset(row for part in parts for row in part)


def load_dataset(*a, **k):
    raise RuntimeError("load_dataset: `datasets` is not installed (bench/device_shims stand-in); nothing loads data here")
