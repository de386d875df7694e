-- Argo CD resource action "abort" for releaseplan.io/ReleasePlan: roll back to the stable revision now.
-- It makes the request `kubectl releaseplan abort` makes: the annotation
-- releaseplan.io/request = "abort/<id>", which the operator applies once and
-- acknowledges in status.acknowledgedRequest. The id is the plan's
-- resourceVersion, so the same click on the same plan asks once.
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["releaseplan.io/request"] = "abort/argocd-" .. obj.metadata.resourceVersion
return obj
