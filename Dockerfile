# The project's two images, from one build. Every entry point is `kafka-mirror <command>` (the
# chart, the worker Deployments and the audit CronJob set `command: ["kafka-mirror"]`):
#   operator (the default target): the operator, the mirroring workers and the smoke check;
#     no Java, no Spark:
#       docker build -t ghcr.io/kafka-mirror/kafka-mirror-operator:0.1.0 .
#   audit: the PySpark audit the CronJobs run, with a Java runtime and Spark's Kafka source:
#       docker build --target audit -t ghcr.io/kafka-mirror/kafka-mirror-operator-audit:0.1.0 .
# Build from the repository root.
#
# The base images are build arguments, so a machine that reaches no image registry builds from
# local ones (the dev stack makes them from Debian's packages and builds this file on them with
# buildah: dev/python/kafka_mirror_dev/images.py, docs/dev-stack.md):
#   PYTHON_IMAGE  the runtime's base: a Debian bookworm with Python 3.11 whose `pip` is on PATH
#   MAVEN_IMAGE   the Maven and JDK 17 that resolve Spark's Kafka source
#   SPARK_JARS    an image holding those jars in /jars instead (the Maven stage then is skipped)
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG MAVEN_IMAGE=maven:3.9-eclipse-temurin-17
ARG SPARK_JARS=spark-jars-maven

# Stage 1: Spark's Kafka source and the jars it needs beyond PySpark's own, resolved from the
# same pom and Maven settings as the dev stack (kafka_mirror_dev.builds.maven_libs), so the
# image audits with the jars the tests use.
FROM ${MAVEN_IMAGE} AS spark-jars-maven
WORKDIR /build
COPY dev/maven/settings.xml dev/maven/settings.xml
COPY dev/maven/spark-kafka/pom.xml dev/maven/spark-kafka/pom.xml
RUN mvn -B -q -f dev/maven/spark-kafka/pom.xml --global-settings dev/maven/settings.xml \
        dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=/jars

# The jars the runtime takes: the stage above, or the SPARK_JARS image.
# hadolint ignore=DL3006
FROM ${SPARK_JARS} AS spark-jars

# Stage 2: the package's wheel, its hot path compiled with mypyc (setup.py) by a compiler the
# runtime does not carry. Only the product: dev/python is neither copied nor in the context.
# hadolint ignore=DL3006
FROM ${PYTHON_IMAGE} AS wheel
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev python3-dev \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml setup.py README.md /build/
COPY operator/ /build/operator/
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels /build

# Stage 3: what both images have: the labels, the pods' user and environment, and the
# mimalloc the workers preload (kafka_mirror.render.WORKER_ENV).
# hadolint ignore=DL3006
FROM ${PYTHON_IMAGE} AS runtime

# Keep in step with pyproject.toml's version (tests/unit/test_shipping_lint.py checks it).
ARG VERSION=0.1.0
ARG PYTHON_IMAGE
LABEL org.opencontainers.image.title="kafka-mirror-operator" \
      org.opencontainers.image.description="Kubernetes operator for Kafka topic mirroring, compatible with MirrorMaker 2" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_IMAGE}"

# Debian's security updates replace package versions, so pinning one would break the build
# (DL3008).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libmimalloc2.0 \
    && rm -rf /var/lib/apt/lists/*

# The uid every pod runs as (the chart's operator, and the workers and audits the operator
# starts: kafka_mirror.render.IMAGE_USER) needs a name: Java takes user.home from /etc/passwd
# (not $HOME), and Hadoop's login inside Spark fails ("invalid null input: name") for a
# nameless uid. Home /tmp: the pods' only writable place (read-only root, /tmp an emptyDir).
RUN groupadd --gid 10001 kafka-mirror \
    && useradd --uid 10001 --gid 10001 --no-log-init --no-create-home --home-dir /tmp \
        --shell /usr/sbin/nologin kafka-mirror

ENV HOME=/tmp \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
WORKDIR /tmp
ENTRYPOINT ["kafka-mirror"]
CMD ["--help"]

# Stage 4: the audit image: PySpark (the package's `audit` extra), the Java 17 runtime it needs
# and Spark's Kafka source. The slim image lacks the man directory the JRE's postinst links
# into. /usr/lib/jvm/java-17 names the JRE on every architecture (the package's own directory
# ends in -amd64, -arm64, ...).
FROM runtime AS audit
LABEL org.opencontainers.image.title="kafka-mirror-operator-audit"
# hadolint ignore=DL3008
RUN mkdir -p /usr/share/man/man1 \
    && apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f /usr/bin/java)")")" /usr/lib/jvm/java-17
ENV JAVA_HOME=/usr/lib/jvm/java-17 \
    KAFKA_MIRROR_SPARK_JARS=/opt/kafka-mirror/spark-jars
COPY --from=spark-jars /jars/ /opt/kafka-mirror/spark-jars/
COPY --from=wheel /wheels/ /tmp/wheels/
RUN pip install --no-cache-dir "$(ls /tmp/wheels/*.whl)[audit]" \
    && rm -rf /tmp/wheels \
    && python -c "import kafka_mirror.audit.spark, kafka_mirror.worker.batches as b; assert b.__file__.endswith('.so'), b.__file__"
# Numeric, so the kubelet can verify runAsNonRoot.
USER 10001:10001

# Stage 5, the default: the operator and worker image. The wheel of stage 2 and its
# dependencies; the import fails the build if the hot path did not compile (an interpreted one
# would run, slower).
FROM runtime AS operator
COPY --from=wheel /wheels/ /tmp/wheels/
RUN pip install --no-cache-dir /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels \
    && python -c "import kafka_mirror.worker.batches as b; assert b.__file__.endswith('.so'), b.__file__"
USER 10001:10001
