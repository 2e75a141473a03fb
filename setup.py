"""Maps the top-level folders into one package namespace, ``safactory.<folder>``.

pyproject.toml holds the metadata; this file only lists the packages, subpackages
included, so a wheel carries every module and `import agents` from other libraries never
collides with ours (DESIGN.md, "Layout"). The benchmarks are ``safactory.bench``: one
imports another as a package (``python bench/chaos.py`` and ``python -m safactory.bench.chaos``
both work), never through ``sys.path``.
"""

from setuptools import find_packages, setup

FOLDERS = ("cli", "schemas", "infra", "agents", "streams", "sinks", "trainer", "tools", "bench")

setup(
    packages=[
        name
        for folder in FOLDERS
        for name in [
            f"safactory.{folder}",
            *(f"safactory.{folder}.{p}" for p in find_packages(folder)),
        ]
    ],
    package_dir={f"safactory.{folder}": folder for folder in FOLDERS},
    package_data={
        "safactory.infra": ["kafka/*", "scripts/*"],
        "safactory.streams.audit": ["heads/*.npz"],
        "safactory.tools.audit_training": ["data/*.jsonl"],
        "safactory.agents.suites": ["data/*.json"],
        "": [
            "*.xml",
            "*.properties",
            "*.json",
            "*.jsonl",
            "*.npz",
            "*.safetensors",
            "*.html",
            "*.sh",
            "*.toml",
            "*.yaml",
        ],
    },
)
