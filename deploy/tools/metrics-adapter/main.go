// Command metrics-adapter serves the custom and external metrics APIs
// (custom.metrics.k8s.io/v1beta2, external.metrics.k8s.io/v1beta1) for Steward's local
// control plane, on sigs.k8s.io/custom-metrics-apiserver. Its values are set through the
// cluster itself and read from kube-apiserver on every request, so a change shows at once:
//
//   - object metric <m> of any object (e.g. a Deployment, a Service): the object's
//     annotation metrics.steward.io/<m>, a quantity ("42", "500m", "1Gi");
//   - pods metric <m>: each selected pod's annotation metrics.steward.io/<m> (a pod
//     without it has no value and is left out of the list);
//   - external metric <m> in namespace <ns>: key <m> of every ConfigMap in <ns> labelled
//     metrics.steward.io/external=true whose labels match the request's metric selector,
//     one value each, labelled with the ConfigMap's labels.
//
// A metric's own labels are none for object and pods metrics: a metric selector that
// needs a label matches nothing. A value that is not a quantity is an error of the
// request (500) naming the object.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/component-base/logs"
	"k8s.io/klog/v2"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"k8s.io/metrics/pkg/apis/external_metrics"

	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
	"sigs.k8s.io/custom-metrics-apiserver/pkg/provider/helpers"
)

// version is stamped at link time (-X main.version=...).
var version = "dev"

const (
	// annotationPrefix names an object's (or a pod's) metric annotation.
	annotationPrefix = "metrics.steward.io/"
	// externalLabel marks the ConfigMaps that hold external metrics.
	externalLabel = "metrics.steward.io/external"
)

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// annotationProvider reads every value from the objects the request names.
type annotationProvider struct {
	client dynamic.Interface
	mapper apimeta.RESTMapper
}

func (p *annotationProvider) resource(info provider.CustomMetricInfo, namespace string) (dynamic.ResourceInterface, provider.CustomMetricInfo, error) {
	info, _, err := info.Normalized(p.mapper)
	if err != nil {
		return nil, info, err
	}
	gvr, err := helpers.ResourceFor(p.mapper, info)
	if err != nil {
		return nil, info, err
	}
	if info.Namespaced {
		return p.client.Resource(gvr).Namespace(namespace), info, nil
	}
	return p.client.Resource(gvr), info, nil
}

// valueOf is the object's value of the metric, or false when it has none.
func valueOf(obj *unstructured.Unstructured, metric string) (resource.Quantity, bool, error) {
	raw, ok := obj.GetAnnotations()[annotationPrefix+metric]
	if !ok {
		return resource.Quantity{}, false, nil
	}
	q, err := resource.ParseQuantity(raw)
	if err != nil {
		return q, false, fmt.Errorf("%s %s/%s: annotation %s%s=%q is not a quantity: %w",
			obj.GetKind(), obj.GetNamespace(), obj.GetName(), annotationPrefix, metric, raw, err)
	}
	return q, true, nil
}

func (p *annotationProvider) metricValue(obj *unstructured.Unstructured, info provider.CustomMetricInfo, value resource.Quantity, metricSelector labels.Selector) (*custom_metrics.MetricValue, error) {
	ref, err := helpers.ReferenceFor(p.mapper, types.NamespacedName{Namespace: obj.GetNamespace(), Name: obj.GetName()}, info)
	if err != nil {
		return nil, err
	}
	metric := &custom_metrics.MetricValue{
		DescribedObject: ref,
		Metric:          custom_metrics.MetricIdentifier{Name: info.Metric},
		Timestamp:       metav1.Now(),
		Value:           value,
	}
	if !metricSelector.Empty() {
		selector, err := metav1.ParseToLabelSelector(metricSelector.String())
		if err != nil {
			return nil, err
		}
		metric.Metric.Selector = selector
	}
	return metric, nil
}

// GetMetricByName is the object's annotation; not found when the object or the
// annotation is missing.
func (p *annotationProvider) GetMetricByName(ctx context.Context, name types.NamespacedName, info provider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValue, error) {
	client, info, err := p.resource(info, name.Namespace)
	if err != nil {
		return nil, err
	}
	notFound := provider.NewMetricNotFoundForSelectorError(info.GroupResource, info.Metric, name.Name, metricSelector)
	if !metricSelector.Matches(labels.Set{}) {
		return nil, notFound
	}
	obj, err := client.Get(ctx, name.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, notFound
	}
	if err != nil {
		return nil, err
	}
	value, ok, err := valueOf(obj, info.Metric)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound
	}
	return p.metricValue(obj, info, value, metricSelector)
}

// GetMetricBySelector is the annotation of every selected object that has one.
func (p *annotationProvider) GetMetricBySelector(ctx context.Context, namespace string, selector labels.Selector, info provider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValueList, error) {
	client, info, err := p.resource(info, namespace)
	if err != nil {
		return nil, err
	}
	result := &custom_metrics.MetricValueList{Items: []custom_metrics.MetricValue{}}
	if !metricSelector.Matches(labels.Set{}) {
		return result, nil
	}
	list, err := client.List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, err
	}
	for i := range list.Items {
		obj := &list.Items[i]
		value, ok, err := valueOf(obj, info.Metric)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		metric, err := p.metricValue(obj, info, value, metricSelector)
		if err != nil {
			return nil, err
		}
		result.Items = append(result.Items, *metric)
	}
	return result, nil
}

// ListAllMetrics lists none: any metric of any resource may be asked for, and has a
// value when its object carries the annotation.
func (p *annotationProvider) ListAllMetrics() []provider.CustomMetricInfo {
	return nil
}

// GetExternalMetric is key <metric> of every marked ConfigMap of the namespace that
// the metric selector selects.
func (p *annotationProvider) GetExternalMetric(ctx context.Context, namespace string, metricSelector labels.Selector, info provider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	marked, err := labels.NewRequirement(externalLabel, selection.Equals, []string{"true"})
	if err != nil {
		return nil, err
	}
	selector := metricSelector.Add(*marked)
	list, err := p.client.Resource(configMaps).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, err
	}
	result := &external_metrics.ExternalMetricValueList{Items: []external_metrics.ExternalMetricValue{}}
	for _, cm := range list.Items {
		raw, ok, err := unstructured.NestedString(cm.Object, "data", info.Metric)
		if err != nil || !ok {
			continue
		}
		value, err := resource.ParseQuantity(raw)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s: %s=%q is not a quantity: %w", namespace, cm.GetName(), info.Metric, raw, err)
		}
		result.Items = append(result.Items, external_metrics.ExternalMetricValue{
			MetricName:   info.Metric,
			MetricLabels: cm.GetLabels(),
			Timestamp:    metav1.Now(),
			Value:        value,
		})
	}
	return result, nil
}

// ListAllExternalMetrics lists none: any name may be asked for.
func (p *annotationProvider) ListAllExternalMetrics() []provider.ExternalMetricInfo {
	return nil
}

func main() {
	logs.InitLogs()
	defer logs.FlushLogs()

	adapter := &basecmd.AdapterBase{Name: "steward-metrics-adapter"}
	// Discovery of new resource kinds (e.g. a CRD) is refreshed this often.
	adapter.DiscoveryInterval = 30 * time.Second
	logs.AddFlags(adapter.Flags())
	if err := adapter.Flags().Parse(os.Args); err != nil {
		klog.Fatalf("unable to parse flags: %v", err)
	}
	client, err := adapter.DynamicClient()
	if err != nil {
		klog.Fatalf("unable to construct the dynamic client: %v", err)
	}
	mapper, err := adapter.RESTMapper()
	if err != nil {
		klog.Fatalf("unable to construct the REST mapper: %v", err)
	}
	p := &annotationProvider{client: client, mapper: mapper}
	adapter.WithCustomMetrics(p)
	adapter.WithExternalMetrics(p)
	klog.InfoS("starting the metrics adapter", "version", version)
	if err := adapter.Run(context.Background()); err != nil {
		klog.Fatalf("unable to run the metrics adapter: %v", err)
	}
}
