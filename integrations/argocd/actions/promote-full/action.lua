-- Argo CD resource action "promote-full" for releaseplan.io/ReleasePlan: go to 100% at once.
-- It makes the request `kubectl releaseplan promote --full` makes: the annotation
-- releaseplan.io/request = "promote-full/<id>", which the operator applies once and
-- acknowledges in status.acknowledgedRequest. The id is the plan's
-- resourceVersion, so the same click on the same plan asks once.
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["releaseplan.io/request"] = "promote-full/argocd-" .. obj.metadata.resourceVersion
return obj
