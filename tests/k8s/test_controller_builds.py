"""Pure parts of the controllers' builds and installs; no Go, no cluster."""

from pathlib import Path

import pytest

from .controller_builds import BuildError, volcano_replacements
from .real_controllers import volcano_webhook_configurations

VOLCANO_GO_MOD = """module volcano.sh/volcano

require volcano.sh/apis v1.15.1

replace (
\tk8s.io/api => k8s.io/api v0.35.3
\t// Use local staging directory for APIs development
\tvolcano.sh/apis => ./staging/src/volcano.sh/apis
)
"""

WEBHOOKS_TEMPLATE = """{{- if .Values.custom.admission_enable }}
{{- if .Values.custom.enabled_admissions | regexMatch "/jobs/mutate" }}
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: volcano-admission-service-jobs-mutate
  {{- if .Values.custom.common_labels }}
  labels:
    {{- toYaml .Values.custom.common_labels | nindent 4 }}
  {{- end }}
webhooks:
  - clientConfig:
      service:
        name: {{ .Release.Name }}-admission-service
        namespace: {{ .Release.Namespace }}
        path: /jobs/mutate
    name: mutatejob.volcano.sh
{{- end }}
{{- if .Values.custom.enabled_admissions | regexMatch "/pods/mutate" }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: volcano-admission-service-pods-mutate
webhooks:
  - clientConfig:
      service:
        path: /pods/mutate
    name: mutatepod.volcano.sh
{{- end }}
{{- end }}
"""


def test_volcano_keeps_its_replacements_but_takes_its_apis_module_from_a_directory() -> None:
    assert volcano_replacements(VOLCANO_GO_MOD, Path("/shared/apis")) == [
        "k8s.io/api => k8s.io/api v0.35.3",
        "volcano.sh/apis => /shared/apis",
    ]


def test_a_volcano_go_mod_without_replacements_is_a_build_error() -> None:
    with pytest.raises(BuildError):
        volcano_replacements("module volcano.sh/volcano\n", Path("/x"))


def test_volcano_webhooks_render_with_the_charts_default_admissions_only() -> None:
    [jobs] = volcano_webhook_configurations(WEBHOOKS_TEMPLATE)
    assert jobs["metadata"] == {"name": "volcano-admission-service-jobs-mutate"}
    service = jobs["webhooks"][0]["clientConfig"]["service"]
    assert service == {
        "name": "volcano-admission-service",
        "namespace": "volcano-system",
        "path": "/jobs/mutate",
    }
