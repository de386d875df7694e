-- Argo CD resource action "pause" for releaseplan.io/ReleasePlan: hold the rollout where it is.
-- It makes the request `kubectl releaseplan pause` makes: the annotation
-- releaseplan.io/request = "pause/<id>", which the operator applies once and
-- acknowledges in status.acknowledgedRequest. The id is the plan's
-- resourceVersion, so the same click on the same plan asks once.
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["releaseplan.io/request"] = "pause/argocd-" .. obj.metadata.resourceVersion
return obj
