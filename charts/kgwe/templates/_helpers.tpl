{{/* Names. */}}
{{- define "kgwe.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "kgwe.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "kgwe.webhookName" -}}{{ include "kgwe.fullname" . }}-webhook{{- end }}
{{- define "kgwe.agentName" -}}{{ include "kgwe.fullname" . }}-agent{{- end }}
{{- define "kgwe.certsName" -}}{{ include "kgwe.fullname" . }}-certs{{- end }}
{{/* The CA's own Secret (ca.crt, ca.key): only the certificate runners may read it. */}}
{{- define "kgwe.caSecret" -}}{{ default (printf "%s-ca" (include "kgwe.fullname" .)) .Values.certs.caSecretName }}{{- end }}
{{- define "kgwe.identitySecret" -}}{{ include "kgwe.fullname" . }}-identity{{- end }}
{{- define "kgwe.tlsSecret" -}}{{ default (printf "%s-tls" (include "kgwe.fullname" .)) .Values.certs.secretName }}{{- end }}
{{- define "kgwe.webhookServiceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "kgwe.webhookName" . }}
{{- end }}
{{- define "kgwe.agentServiceAccountUser" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "kgwe.agentName" . }}
{{- end }}

{{- define "kgwe.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/* Labels. */}}
{{- define "kgwe.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/name: {{ include "kgwe.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kgwe
{{- end }}

{{- define "kgwe.selectorLabels" -}}
app.kubernetes.io/name: {{ include "kgwe.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{/*
The configuration file. The chart adds the release namespace to excludedNamespaces and the
webhook's service account to controllerUsers: both must hold whatever the user writes.
*/}}
{{- define "kgwe.configYaml" -}}
{{- $config := deepCopy (.Values.config | default dict) }}
{{- $excluded := include "kgwe.configExcludedNamespaces" . | fromJsonArray }}
{{- $controllers := concat (get $config "controllerUsers" | default list) (list (include "kgwe.webhookServiceAccountUser" .)) | uniq }}
{{- $_ := set $config "excludedNamespaces" $excluded }}
{{- $_ := set $config "controllerUsers" $controllers }}
{{- if .Values.authentication.enabled }}
{{- $_ := set $config "authentication" (dict "clientCAFile" "/etc/kgwe/client-ca/ca.crt" "mode" .Values.authentication.mode "allowedNames" .Values.authentication.allowedNames) }}
{{- end }}
{{- $workloads := deepCopy (get $config "workloads" | default dict) }}
{{- $_ := set $workloads "identityKeyFile" "/etc/kgwe/identity/key" }}
{{- $_ := set $config "workloads" $workloads }}
{{- toYaml $config }}
{{- end }}

{{/* config.excludedNamespaces as the ConfigMap holds it (KGWE's default, kube-system, and the release namespace), JSON. */}}
{{- define "kgwe.configExcludedNamespaces" -}}
{{- concat (get (.Values.config | default dict) "excludedNamespaces" | default (list "kube-system")) (list .Release.Namespace) | uniq | toJson }}
{{- end }}

{{/*
config.workloads.controllerIdentities as KGWE reads it (webhook/config.py DEFAULT_CONTROLLER_IDENTITIES when
unset; a chart test keeps the two lists equal), JSON: the requesters whose pods are judged as the user who
wrote the workload (a signed kgwe.io/requested-by, webhook/workloads/identity.py).
*/}}
{{- define "kgwe.controllerIdentities" -}}
{{- $workloads := get (.Values.config | default dict) "workloads" | default dict }}
{{- if hasKey $workloads "controllerIdentities" }}
{{- $workloads.controllerIdentities | default list | toJson }}
{{- else }}
{{- list
  "system:kube-controller-manager"
  "system:serviceaccount:kube-system:replicaset-controller"
  "system:serviceaccount:kube-system:deployment-controller"
  "system:serviceaccount:kube-system:job-controller"
  "system:serviceaccount:kube-system:statefulset-controller"
  "system:serviceaccount:kube-system:daemon-set-controller"
  "system:serviceaccount:kube-system:cronjob-controller"
  "system:serviceaccount:jobset-system:jobset-controller-manager"
  "system:serviceaccount:lws-system:lws-controller-manager"
  "system:serviceaccount:kubeflow:training-operator"
  "system:serviceaccount:ray-system:kuberay-operator"
  "system:serviceaccount:kueue-system:kueue-controller-manager"
  | toJson }}
{{- end }}
{{- end }}

{{/*
The resources KGWE counts as GPUs (policies/vocabulary/resources.py GPU_RESOURCE_PREFIXES; a chart test keeps
them equal), JSON. Not webhooks.resourcePrefixes: that list says which pods are sent to the webhooks.
*/}}
{{- define "kgwe.countedGpuPrefixes" -}}
{{- list "nvidia.com/" "amd.com/gpu" | toJson }}
{{- end }}

{{/*
CEL: do the labels `.labels` (a CEL expression of a map) match the label selector `.selector` (a value of
values.yaml), as KGWE reads a selector (policies/loading/selectors.py)? A selector KGWE refuses to read (a
value that is not a string, In or NotIn without values, Exists or DoesNotExist with values, an unknown
operator) matches nothing there, so `false` here; an empty one matches everything (`true`). Strings are
written as JSON strings, which CEL reads as double-quoted literals.
*/}}
{{- define "kgwe.cel.selectorMatches" -}}
{{- $selector := .selector }}
{{- $labels := .labels }}
{{- $valid := kindIs "map" $selector }}
{{- $terms := list }}
{{- if $valid }}
{{- $matchLabels := get $selector "matchLabels" }}
{{- if not (empty $matchLabels) }}
{{- if kindIs "map" $matchLabels }}
{{- range $key, $value := $matchLabels }}
{{- if kindIs "string" $value }}
{{- $terms = append $terms (printf "(%s in %s && %s[%s] == %s)" (toJson $key) $labels $labels (toJson $key) (toJson $value)) }}
{{- else }}
{{- $valid = false }}
{{- end }}
{{- end }}
{{- else }}
{{- $valid = false }}
{{- end }}
{{- end }}
{{- $expressions := get $selector "matchExpressions" }}
{{- if not (empty $expressions) }}
{{- if kindIs "slice" $expressions }}
{{- range $expressions }}
{{- if not (kindIs "map" .) }}
{{- $valid = false }}
{{- else }}
{{- $operator := get . "operator" }}
{{- $values := get . "values" | default list }}
{{- $key := get . "key" }}
{{- if not (and (hasKey . "key") (kindIs "string" $key) (kindIs "string" $operator) (has $operator (list "In" "NotIn" "Exists" "DoesNotExist")) (kindIs "slice" $values)) }}
{{- $valid = false }}
{{- else }}
{{- range $values }}{{ if not (kindIs "string" .) }}{{ $valid = false }}{{ end }}{{ end }}
{{- $in := printf "%s in %s" (toJson $key) $labels }}
{{- if eq $operator "In" }}
{{- if empty $values }}{{ $valid = false }}{{ end }}
{{- $terms = append $terms (printf "(%s && %s[%s] in %s)" $in $labels (toJson $key) (toJson $values)) }}
{{- else if eq $operator "NotIn" }}
{{- if empty $values }}{{ $valid = false }}{{ end }}
{{- $terms = append $terms (printf "(!(%s) || !(%s[%s] in %s))" $in $labels (toJson $key) (toJson $values)) }}
{{- else if eq $operator "Exists" }}
{{- if not (empty $values) }}{{ $valid = false }}{{ end }}
{{- $terms = append $terms (printf "(%s)" $in) }}
{{- else }}
{{- if not (empty $values) }}{{ $valid = false }}{{ end }}
{{- $terms = append $terms (printf "!(%s)" $in) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- else }}
{{- $valid = false }}
{{- end }}
{{- end }}
{{- end }}
{{- if not $valid }}false{{ else if empty $terms }}true{{ else }}{{ join " && " $terms }}{{ end }}
{{- end }}

{{/* Namespaces the webhook configurations never send: kube-system, KGWE's own, and the user's list. */}}
{{- define "kgwe.excludedNamespaces" -}}
{{- concat (list "kube-system" .Release.Namespace) .Values.webhooks.excludedNamespaces | uniq | toJson }}
{{- end }}

{{/*
The resource prefixes that make a pod a GPU pod, as a JSON list: webhooks.resourcePrefixes and, with
webhooks.resourceClaimPods, `deviceclass.resource.kubernetes.io/` (every DeviceClass is that extended
resource, KEP-5004: a pod asking for it gets DRA devices, GPUs among them, without naming a claim).
*/}}
{{- define "kgwe.gpuResourcePrefixes" -}}
{{- $prefixes := .Values.webhooks.resourcePrefixes }}
{{- if .Values.webhooks.resourceClaimPods }}{{ $prefixes = append $prefixes "deviceclass.resource.kubernetes.io/" }}{{ end }}
{{- $prefixes | uniq | toJson }}
{{- end }}

{{/*
CEL over a pod (`obj`): does any container or init container request or limit a resource whose
name starts with one of the GPU prefixes?
*/}}
{{- define "kgwe.cel.requestsGpu" -}}
{{- $prefixes := list }}
{{- range (include "kgwe.gpuResourcePrefixes" . | fromJsonArray) }}{{ $prefixes = append $prefixes (printf "r.startsWith('%s')" .) }}{{ end }}
{{- $matches := join " || " $prefixes }}
{{- $container := printf "has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, %s)) || (has(c.resources.requests) && c.resources.requests.exists(r, %s)))" $matches $matches }}
{{- printf "object.spec.containers.exists(c, %s) || (has(object.spec.initContainers) && object.spec.initContainers.exists(c, %s))" $container $container }}
{{- if .Values.webhooks.resourceClaimPods }} || (has(object.spec.resourceClaims) && size(object.spec.resourceClaims) > 0){{ end }}
{{- end }}

{{/* CEL: does `obj` carry any kgwe.io/ annotation? */}}
{{- define "kgwe.cel.kgweAnnotations" -}}
has({{ . }}.metadata.annotations) && {{ . }}.metadata.annotations.exists(k, k.startsWith('kgwe.io/'))
{{- end }}

{{/*
CEL for UPDATE: did any kgwe.io/ key of `field` (annotations or labels) appear, change or go away?
Other updates (finalizer removal, unrelated labels) never reach the fail-closed webhook.
*/}}
{{- define "kgwe.cel.kgweKeysChanged" -}}
{{- $n := printf "object.metadata.%s" . }}
{{- $o := printf "oldObject.metadata.%s" . }}
{{- printf "(has(%s) && %s.exists(k, k.startsWith('kgwe.io/') && (!has(%s) || !(k in %s) || %s[k] != %s[k]))) || (has(%s) && %s.exists(k, k.startsWith('kgwe.io/') && (!has(%s) || !(k in %s))))" $n $n $o $o $o $n $o $o $n $n }}
{{- end }}

{{/* True when an UPDATE changes the pod's labels or annotations at all (what GPUPolicies judge on UPDATE). */}}
{{- define "kgwe.cel.metadataChanged" -}}
{{- $n := printf "object.metadata.%s" . }}
{{- $o := printf "oldObject.metadata.%s" . }}
{{- printf "(has(%s) != has(%s)) || (has(%s) && %s != %s)" $n $o $n $n $o }}
{{- end }}

{{/* True when an UPDATE removes or adds scheduling gates (KGWE's gang gate must not be lifted by users). */}}
{{- define "kgwe.cel.gatesChanged" -}}
{{- "(has(object.spec.schedulingGates) != has(oldObject.spec.schedulingGates)) || (has(object.spec.schedulingGates) && object.spec.schedulingGates != oldObject.spec.schedulingGates)" }}
{{- end }}

{{/* matchConditions shared by both webhooks. */}}
{{- define "kgwe.matchConditions" -}}
- name: exclude-kgwe-namespace
  expression: {{ printf "request.namespace != '%s'" .Release.Namespace | quote }}
- name: exclude-mirror-pods
  expression: "!has(object.metadata.annotations) || !('kubernetes.io/config.mirror' in object.metadata.annotations)"
- name: gpu-or-kgwe-pod
  expression: {{ printf "%s || (%s) || (request.operation == 'UPDATE' && %s)" (include "kgwe.cel.requestsGpu" .) (include "kgwe.cel.kgweAnnotations" "object") (include "kgwe.cel.kgweAnnotations" "oldObject") | quote }}
{{- end }}

{{- define "kgwe.namespaceSelector" -}}
matchExpressions:
  - key: kubernetes.io/metadata.name
    operator: NotIn
    values: {{ include "kgwe.excludedNamespaces" . }}
{{- with .Values.webhooks.namespaceSelectorExpressions }}
{{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}

{{- define "kgwe.webhookClientConfig" -}}
service:
  name: {{ include "kgwe.webhookName" .root }}
  namespace: {{ .root.Release.Namespace }}
  path: {{ .path }}
  port: {{ .root.Values.webhook.service.port }}
{{- end }}

{{- define "kgwe.caInjectionAnnotations" -}}
{{- if .Values.certManager.enabled }}
annotations:
  # cainjector copies the serving certificate's CA into every webhook's caBundle.
  cert-manager.io/inject-ca-from: {{ .Release.Namespace }}/{{ include "kgwe.webhookName" . }}
{{- end }}
{{- end }}

{{/*
CEL over a pod spec (`.spec`, an expression): does any container or init container request or limit a
GPU resource, or (webhooks.resourceClaimPods) does the spec name ResourceClaims? Every optional field is
guarded with has(): a matchCondition error would apply the webhook's failurePolicy.
*/}}
{{- define "kgwe.cel.specRequestsGpu" -}}
{{- $prefixes := list }}
{{- range (include "kgwe.gpuResourcePrefixes" .root | fromJsonArray) }}{{ $prefixes = append $prefixes (printf "r.startsWith('%s')" .) }}{{ end }}
{{- $matches := join " || " $prefixes }}
{{- $container := printf "has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(r, %s)) || (has(c.resources.requests) && c.resources.requests.exists(r, %s)))" $matches $matches }}
{{- printf "(has(%s.containers) && %s.containers.exists(c, %s)) || (has(%s.initContainers) && %s.initContainers.exists(c, %s))" .spec .spec $container .spec .spec $container }}
{{- /* Claims of the pods' own may ask for GPUs (docs/dra.md): the template must be signed for its author. */}}
{{- if .root.Values.webhooks.resourceClaimPods }}{{ printf " || (has(%s.resourceClaims) && size(%s.resourceClaims) > 0)" .spec .spec }}{{ end }}
{{- end }}

{{/*
The workload webhooks (SPEC section 7, docs/workloads.md): one per kind in webhooks.workloads.kinds, on
CREATE and UPDATE, sent only when a pod template asks for a GPU or carries kgwe.io/ keys, or the
workload itself carries kgwe.io/ annotations. A kind whose CRD is not installed never matches a
request: the rule is inert, nothing breaks.
*/}}
{{- define "kgwe.workloadWebhooks" -}}
{{- $root := .root }}
{{- $verb := .verb }}
{{- if $root.Values.webhooks.workloads.enabled }}
{{- range $root.Values.webhooks.workloads.kinds }}
{{- $template := printf "(has(t.spec) && (%s)) || (has(t.metadata) && has(t.metadata.annotations) && t.metadata.annotations.exists(k, k.startsWith('kgwe.io/')))" (include "kgwe.cel.specRequestsGpu" (dict "root" $root "spec" "t.spec")) }}
- name: {{ printf "%s.%s.kgwe.io" (lower .kind) $verb }}
  admissionReviewVersions: [v1]
  clientConfig:
    {{- include "kgwe.webhookClientConfig" (dict "root" $root "path" (printf "/%s" $verb)) | nindent 4 }}
  rules:
    - apiGroups: [{{ .apiGroup | quote }}]
      apiVersions: {{ .apiVersions | toJson }}
      operations: [CREATE, UPDATE]
      resources: [{{ .resource }}]
      scope: Namespaced
  matchPolicy: Equivalent
  namespaceSelector:
    {{- include "kgwe.namespaceSelector" $root | nindent 4 }}
  matchConditions:
    - name: exclude-kgwe-namespace
      expression: {{ printf "request.namespace != '%s'" $root.Release.Namespace | quote }}
    - name: gpu-or-kgwe-template
      expression: {{ printf "(%s) || (%s).exists(t, %s)" (include "kgwe.cel.kgweAnnotations" "object") .templates $template | quote }}
  {{- if eq $verb "mutate" }}
  failurePolicy: {{ $root.Values.webhooks.mutating.failurePolicy }}
  timeoutSeconds: {{ $root.Values.webhooks.mutating.timeoutSeconds }}
  sideEffects: NoneOnDryRun
  # A Kueue or other mutating webhook that changes the template after KGWE gets KGWE called again.
  reinvocationPolicy: {{ $root.Values.webhooks.mutating.reinvocationPolicy }}
  {{- else }}
  failurePolicy: {{ $root.Values.webhooks.workloads.validatingFailurePolicy }}
  timeoutSeconds: {{ $root.Values.webhooks.validating.timeoutSeconds }}
  sideEffects: NoneOnDryRun
  {{- end }}
{{- end }}
{{- end }}
{{- end }}
