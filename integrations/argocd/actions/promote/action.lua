-- Argo CD resource action "promote" for releaseplan.io/ReleasePlan: skip the current pause or step.
-- It makes the request `kubectl releaseplan promote` makes: the annotation
-- releaseplan.io/request = "promote/<id>", which the operator applies once and
-- acknowledges in status.acknowledgedRequest. The id is the plan's
-- resourceVersion, so the same click on the same plan asks once.
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["releaseplan.io/request"] = "promote/argocd-" .. obj.metadata.resourceVersion
return obj
