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
{{- if .Values.profiles.enabled -}}
{{- .Values.profiles.namespaceTemplate -}}
{{- else if eq .Values.kernels.namespacePolicy "shared" -}}
{{- include "distrun.kernelNamespace" . -}}
{{- else -}}
{{- .Values.kernels.namespaceTemplate -}}
{{- end -}}
{{- end -}}

{{- define "distrun.jobNamespaces" -}}
{{- .Values.singleuser.jobNamespaces | default (list .Release.Namespace) | toJson -}}
{{- end -}}

{{- define "distrun.notebookClusterRole" -}}
{{- printf "%s-%s-notebook" (include "distrun.fullname" .) .Release.Namespace -}}
{{- end -}}

{{- define "distrun.hubClusterRole" -}}
{{- printf "%s-%s-hub-profiles" (include "distrun.fullname" .) .Release.Namespace -}}
{{- end -}}

{{- define "distrun.gatewayClusterRole" -}}
{{- printf "%s-%s-gateway-kernels" (include "distrun.fullname" .) .Release.Namespace -}}
{{- end -}}

{{- /* The settings of distrun_profiles.ProfileSettings, as JSON. */ -}}
{{- define "distrun.profileSettings" -}}
{{- $p := .Values.profiles -}}
{{- $network := dict
      "enabled" $p.network.enabled
      "hub_namespace" .Release.Namespace
      "gateway_pod_labels" (include "distrun.gatewaySelector" . | fromYaml)
      "hub_pod_labels" $p.hub.podLabels
      "hub_port" $p.hub.port
      "proxy_pod_labels" $p.hub.proxyPodLabels
      "notebook_pod_labels" .Values.singleuser.podSelector
      "api_server_cidrs" $p.network.apiServerCIDRs
      "internet_egress" $p.network.internetEgress
      "private_cidrs" $p.network.privateCIDRs -}}
{{- /* The cluster's globalDefault PriorityClass is written into every pod that names none:
       an allow-list always holds it (nothing is found by `helm template`). */ -}}
{{- $allowed := $p.allowedPriorityClasses -}}
{{- if kindIs "slice" $allowed -}}
{{- range (lookup "scheduling.k8s.io/v1" "PriorityClass" "" "").items -}}
{{- if .globalDefault -}}{{- $allowed = append $allowed .metadata.name -}}{{- end -}}
{{- end -}}
{{- end -}}
{{- $settings := dict
      "enabled" $p.enabled
      "namespace_template" $p.namespaceTemplate
      "notebook_service_account" $p.notebookServiceAccount
      "notebook_cluster_role" (include "distrun.notebookClusterRole" .)
      "gateway_cluster_role" (include "distrun.gatewayClusterRole" .)
      "gateway_service_account" (printf "%s-gateway" (include "distrun.fullname" .))
      "gateway_namespace" .Release.Namespace
      "pod_security" $p.podSecurity
      "resource_quota" $p.resourceQuota
      "limit_range" $p.limitRange
      "allowed_priority_classes" $allowed
      "network" $network -}}
{{- toPrettyJson $settings -}}
{{- end -}}
