module day0.local/k8s/etcd

go 1.26.0
