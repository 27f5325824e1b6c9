"""fairseq-urpe: RPE and universal RPE (URPE) attention as a fairseq user-dir plugin."""

from setuptools import find_packages, setup

setup(
    name="fairseq-urpe",
    version="0.1.0",
    description="Relative-position (RPE) and universal RPE (URPE) attention for fairseq language models",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["fairseq_urpe", "fairseq_urpe.*"]),
    python_requires=">=3.8",
    install_requires=[
        # fairseq 0.12.2 does not import on Python >= 3.11; fairseq-fixed packages fairseq's main branch.
        "fairseq==0.12.2; python_version < '3.11'",
        "fairseq-fixed==0.12.3.1; python_version >= '3.11'",
        "torch>=2.0",
        "numpy<2",  # fairseq's inference datasets use np.compat.long, removed in numpy 2
        "sacremoses",
        "sentencepiece",
        "tensorboardX",
        "matplotlib",  # python -m fairseq_urpe.position_plots
        # No triton here: the fused kernel (fairseq_urpe/kernels) uses the triton that comes with the
        # user's torch (every CUDA build of torch pins its own exact one); the versions it supports are
        # checked at first use (fairseq_urpe/kernels/dispatch.py), and elsewhere the dense attention runs.
    ],
    entry_points={"console_scripts": ["fairseq-urpe-inspect = fairseq_urpe.position_plots:main"]},
    extras_require={"test": ["pytest>=7,<9", "pytest-timeout", "pytest-xdist"]},
)
