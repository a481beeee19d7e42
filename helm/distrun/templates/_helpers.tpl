{{- define "distrun.fullname" -}}
{{- printf "%s-distrun" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}

{{- define "distrun.labels" -}}
app.kubernetes.io/name: distrun
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "distrun.gatewaySelector" -}}
app.kubernetes.io/name: distrun
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: gateway
{{- end -}}

{{- define "distrun.secretName" -}}
{{- .Values.gateway.existingSecret | default (printf "%s-gateway" (include "distrun.fullname" .)) -}}
{{- end -}}

{{- define "distrun.kernelNamespace" -}}
{{- .Values.kernels.namespace | default .Release.Namespace -}}
{{- end -}}

{{- /* What the identity front writes into KERNEL_NAMESPACE. */ -}}
{{- define "distrun.namespacePolicy" -}}
{{- if eq .Values.kernels.namespacePolicy "shared" -}}
{{- include "distrun.kernelNamespace" . -}}
{{- else -}}
{{- .Values.kernels.namespaceTemplate -}}
{{- end -}}
{{- end -}}

{{- define "distrun.jobNamespaces" -}}
{{- .Values.singleuser.jobNamespaces | default (list .Release.Namespace) | toJson -}}
{{- end -}}
