# One image for every node role (SuperLink, SuperNode, the `testbed` runner): the role
# comes from the command line (`testbed node superlink|supernode ...`, `testbed run ...`),
# exactly as in the local backend. See docker/README.md.
#
#   docker build --network host -t continuum-testbed:latest .
#   docker build --network host --build-arg BASE_IMAGE=continuum-base:bookworm -t ... .
#
# BASE_IMAGE: any image with Python 3.11 and a working `python3 -m venv` (the default,
# or Debian bookworm's python3 + python3-venv as docker/e2e.sh builds with debootstrap).
# If wheelhouse/ in the build context holds wheels, everything is installed from it
# (`--no-index`: no network, no TLS inside the build); else from PyPI, with torch from
# the PyTorch CPU index (PyPI's Linux torch wheel pulls several GB of CUDA libraries).
# Two stages, so the wheelhouse (~0.5 GB) is not a layer of the final image.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS venv
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG EXTRAS=all
ENV PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python3 -m venv /opt/venv
COPY wheelhouse/ /wheelhouse/
COPY pyproject.toml docker/requirements.py /tmp/req/
# torch pinned first (one resolution for the CPU build), then the project's dependencies.
RUN set -eu; \
    python3 /tmp/req/requirements.py /tmp/req/pyproject.toml $EXTRAS > /tmp/req/requirements.txt; \
    torch="$(grep '^torch' /tmp/req/requirements.txt)"; \
    if ls /wheelhouse/*.whl >/dev/null 2>&1; then \
        echo "installing from the wheelhouse ($(ls /wheelhouse/*.whl | wc -l) wheels)"; \
        pip install --no-index --find-links /wheelhouse "$torch" "setuptools>=68"; \
        pip install --no-index --find-links /wheelhouse -r /tmp/req/requirements.txt; \
    else \
        echo "no wheels in wheelhouse/: installing from PyPI"; \
        pip install --index-url "$TORCH_INDEX_URL" "$torch"; \
        pip install "setuptools>=68" -r /tmp/req/requirements.txt; \
    fi; \
    pip check

FROM ${BASE_IMAGE}
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    FLWR_TELEMETRY_ENABLED=0 \
    FLWR_DISABLE_UPDATE_CHECK=1 \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLBACKEND=Agg
COPY --from=venv /opt/venv /opt/venv
WORKDIR /app
COPY pyproject.toml README.md* ./
COPY testbed/ testbed/
COPY kernel/ kernel/
COPY nodes/ nodes/
COPY radio/ radio/
COPY ui/ ui/
COPY experiments/ experiments/
# /app/.source-hash: which sources the image holds (a stale image is refused by the
# runner: testbed/backends/image_source.py).
# Editable: testbed.backends.local finds the Flower app at <source root>/nodes/fl/app,
# which must be /app, not site-packages. pyproject names README.md as readme; write a
# stub when the context has none so the metadata build cannot fail on it.
RUN set -eu; \
    test -f README.md || echo "# continuum-testbed" > README.md; \
    pip install --no-deps --no-build-isolation --no-index -e . ; \
    python3 -m testbed.backends.image_source /app > /app/.source-hash; \
    testbed --help > /dev/null; \
    python3 -c "import testbed.backends.local as l; assert (l.APP_DIR / 'pyproject.toml').is_file(), l.APP_DIR"
CMD ["testbed", "--help"]
