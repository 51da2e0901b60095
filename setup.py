"""Packaging for tubespark: a pure-Python Apache Spark connector for Apache InLong TubeMQ."""

from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="tubespark",
    version="0.1.0",
    description="Spark Python Data Source for Apache InLong TubeMQ (pure-Python wire protocol)",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["tubespark", "tubespark.*"]),
    package_data={"tubespark_testbed": ["templates/*"]},
    # conf/ holds one copy of the local cluster's templates and the Spark/tubespark examples; installs copy it.
    data_files=[(f"share/tubespark/conf/{d}", [str(p) for p in sorted(Path("conf", d).glob("*"))])
                for d in ("tubemq", "spark", "tubespark")],
    install_requires=[
        "protobuf>=7.35.1,<8",
    ],
    extras_require={
        "spark": ["pyspark==4.3.0", "pyarrow>=18", "pandas>=2.2,<3"],
        "test": [
            "pyspark==4.3.0",
            "pyarrow>=18",
            "pandas>=2.2,<3",
            "pytest>=8",
            "pytest-timeout>=2.3",
            "chispa>=0.12",
            "ruff>=0.6",
            "grpcio-tools==1.85.1",
            "nbclient>=0.10",
            "ipykernel>=6.29",
            "matplotlib>=3.8",
        ],
    },
    entry_points={"console_scripts": ["tubespark=tubespark.cli:main"]},
)
