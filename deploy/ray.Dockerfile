# netgrad with the Ray extra: the image of the Ray head, the Ray workers (KubeRay RayCluster
# in k8s/raycluster.yaml, the `ray` profile of compose.ray.yaml) and of API replicas that run
# with NETGRAD_EXECUTOR=ray. Driver and cluster must run the same Ray and Python versions, so
# all of them use this one image.
#   docker build -t netgrad:0.1.0 . && docker build -f deploy/ray.Dockerfile -t netgrad-ray:0.1.0 .
FROM netgrad:0.1.0

USER root
RUN pip install 'ray[client]>=2.40,<3'
USER netgrad
