{{/*
`kgwe certs ensure` runs as Helm hooks and as a daily CronJob:
- pre-install/pre-upgrade: create or renew the Secret before the pods that mount it start. On an upgrade
  it patches caBundle first, so a rotated CA is trusted before a certificate signed by it is served; on an
  install the configurations do not exist yet and it skips them.
- post-install/post-upgrade: make the configurations trust the CA (new ones, or ones re-created after
  the emergency switch-off).
- the CronJob renews the serving certificate (and, near its end, the CA) before it expires.
Hook objects are deleted once the hook succeeds, so the CronJob has its own service account.
*/}}

{{- define "kgwe.certs.hookAnnotations" -}}
helm.sh/hook: {{ .events | default "pre-install,pre-upgrade,post-install,post-upgrade" }}
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
{{- end }}

{{/* ServiceAccount, Role, ClusterRole and bindings for one certs runner. Args: root, name, hook. */}}
{{- define "kgwe.certs.rbac" -}}
{{- $root := .root -}}
{{- $meta := dict "root" $root "name" .name "hook" .hook -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  {{- include "kgwe.certs.metadata" $meta | nindent 2 }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  {{- include "kgwe.certs.metadata" $meta | nindent 2 }}
rules:
  # create cannot be limited to one name; the Role is confined to KGWE's namespace.
  - apiGroups: [""]
    resources: [secrets]
    verbs: [create]
  - apiGroups: [""]
    resources: [secrets]
    # The serving Secret the webhook mounts, and the CA's own Secret that nothing else can read.
    resourceNames: [{{ include "kgwe.tlsSecret" $root | quote }}, {{ include "kgwe.caSecret" $root | quote }}]
    verbs: [get, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  {{- include "kgwe.certs.metadata" $meta | nindent 2 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ $root.Release.Namespace }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  {{- include "kgwe.certs.metadata" (merge (dict "clusterScoped" true) $meta) | nindent 2 }}
rules:
  - apiGroups: [admissionregistration.k8s.io]
    resources: [mutatingwebhookconfigurations, validatingwebhookconfigurations]
    resourceNames: [{{ include "kgwe.fullname" $root | quote }}]
    verbs: [get, update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  {{- include "kgwe.certs.metadata" (merge (dict "clusterScoped" true) $meta) | nindent 2 }}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {{ .name }}
subjects:
  - kind: ServiceAccount
    name: {{ .name }}
    namespace: {{ $root.Release.Namespace }}
{{- end }}

{{- define "kgwe.certs.metadata" -}}
name: {{ .name }}
{{- if not .clusterScoped }}
namespace: {{ .root.Release.Namespace }}
{{- end }}
labels:
  {{- include "kgwe.labels" .root | nindent 2 }}
  app.kubernetes.io/component: certs
{{- if .hook }}
annotations:
  {{- include "kgwe.certs.hookAnnotations" (dict "weight" -10) | nindent 2 }}
{{- end }}
{{- end }}

{{/* The pod that runs `kgwe certs ensure`. Args: root, serviceAccount. */}}
{{- define "kgwe.certs.podSpec" -}}
{{- $root := .root -}}
serviceAccountName: {{ .serviceAccount }}
restartPolicy: OnFailure
{{- with $root.Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  runAsNonRoot: true
  runAsUser: 65532
  runAsGroup: 65532
  seccompProfile:
    type: RuntimeDefault
{{- with $root.Values.webhook.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $root.Values.webhook.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
containers:
  - name: certs
    image: {{ include "kgwe.image" $root }}
    imagePullPolicy: {{ $root.Values.image.pullPolicy }}
    command: [kgwe]
    args:
      - certs
      - ensure
      - --namespace
      - {{ $root.Release.Namespace }}
      - --service
      - {{ include "kgwe.webhookName" $root }}
      - --secret
      - {{ include "kgwe.tlsSecret" $root }}
      - --ca-secret
      - {{ include "kgwe.caSecret" $root }}
      - --mutating-config
      - {{ include "kgwe.fullname" $root }}
      - --validating-config
      - {{ include "kgwe.fullname" $root }}
      - --ca-validity-days
      - {{ $root.Values.certs.caValidityDays | quote }}
      - --cert-validity-days
      - {{ $root.Values.certs.certValidityDays | quote }}
      - --renew-before-days
      - {{ $root.Values.certs.renewBeforeDays | quote }}
    resources:
      {{- toYaml $root.Values.certs.resources | nindent 6 }}
    securityContext:
      allowPrivilegeEscalation: false
      readOnlyRootFilesystem: true
      capabilities:
        drop: [ALL]
    volumeMounts:
      - name: tmp
        mountPath: /tmp
volumes:
  - name: tmp
    emptyDir:
      sizeLimit: 16Mi
{{- end }}
