{{/* The name of a component's objects: <release>-<component>. */}}
{{- define "cairn.name" -}}
{{- printf "%s-%s" .root.Release.Name .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "cairn.labels" -}}
app.kubernetes.io/name: cairn
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
{{- end -}}

{{- define "cairn.selector" -}}
app.kubernetes.io/name: cairn
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "cairn.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The masters' addresses, comma-separated: the StatefulSet's stable names. */}}
{{- define "cairn.masters" -}}
{{- $svc := include "cairn.name" (dict "root" . "component" "master") -}}
{{- $list := list -}}
{{- range $i := until (int .Values.master.replicas) -}}
{{- $list = append $list (printf "%s-%d.%s.%s.svc:17000" $svc $i $svc $.Release.Namespace) -}}
{{- end -}}
{{- join "," $list -}}
{{- end -}}

{{/* The masters as Raft peers: ID=HOST:PORT, IDs from 1. */}}
{{- define "cairn.peers" -}}
{{- $svc := include "cairn.name" (dict "root" . "component" "master") -}}
{{- $list := list -}}
{{- range $i := until (int .Values.master.replicas) -}}
{{- $list = append $list (printf "%d=%s-%d.%s.%s.svc:17000" (add $i 1) $svc $i $svc $.Release.Namespace) -}}
{{- end -}}
{{- join "," $list -}}
{{- end -}}

{{/*
An init container that issues the pod its own certificate from the CA
Secret into the "tls" volume. Arguments: root, kind (node, client, admin),
host (a DNS name for the certificate, may be empty).
*/}}
{{- define "cairn.certInit" -}}
- name: cert
  image: {{ include "cairn.image" .root }}
  imagePullPolicy: {{ .root.Values.image.pullPolicy }}
  command: ["cairn", "cert", "issue", "--ca", "/ca", "--kind", {{ .kind | quote }}, "--name", "$(POD_NAME)", "--out", "/tls"{{ if .host }}, "--host", {{ .host | quote }}{{ end }}]
  env:
    - name: POD_NAME
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    - name: POD_NAMESPACE
      valueFrom:
        fieldRef:
          fieldPath: metadata.namespace
  volumeMounts:
    - name: ca
      mountPath: /ca
      readOnly: true
    - name: tls
      mountPath: /tls
{{- end -}}

{{- define "cairn.certVolumes" -}}
- name: ca
  secret:
    secretName: {{ .Values.tls.caSecret }}
    defaultMode: 0400
- name: tls
  emptyDir:
    medium: Memory
{{- end -}}
