package testcluster_test

import authenticationv1 "k8s.io/api/authentication/v1"

var authenticationv1SelfReview = authenticationv1.SelfSubjectReview{}
